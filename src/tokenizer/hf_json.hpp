// HuggingFace `tokenizers` files: reading tokenizer.json (+ tokenizer_config.json) into a
// Vocabulary and writing a Vocabulary back out as an HF tokenizer folder.
//
// Accepted tokenizer.json: model BPE (vocab, merges as "a b" strings or [a, b] pairs,
// ignore_merges, unk_token; no dropout, byte_fallback or subword affixes); pre_tokenizer built
// from Sequence / Split (Regex or String pattern, any behavior, invert) / Digits / ByteLevel
// (use_regex true implies the GPT-2 regex); normalizer null or NFC (NFC is not applied, as in
// llama.cpp); decoder ByteLevel or null; added_tokens with special / lstrip / rstrip /
// single_word flags; post_processor TemplateProcessing (also inside Sequence) sets bos/eos and
// add_bos/add_eos from the special tokens around the single-sequence template. Anything else is
// rejected with "<file>: <field>: <what was expected>".
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

#include "tokenizer/vocabulary.hpp"

namespace steermoe::tokenizer {

// Parses tokenizer.json text. `where` names the input in error messages (usually the path).
Vocabulary parse_tokenizer_json(std::string_view json_text, const std::string& where);
// Applies tokenizer_config.json: bos/eos/pad/unk tokens (string or {"content": ...}),
// add_bos_token / add_eos_token, chat_template (string or list of {name, template}).
void apply_tokenizer_config(std::string_view json_text, const std::string& where,
                            Vocabulary& vocab);
// Reads a tokenizer.json file, and the tokenizer_config.json beside it if there is one.
Vocabulary read_tokenizer_json(const std::filesystem::path& tokenizer_json);

// tokenizer.json text for a vocabulary: Sequence[Split(regex, ...)..., ByteLevel(use_regex=false)],
// decoder ByteLevel, BPE model with merges as "a b" strings (as pairs if a token holds a space).
// Throws steermoe::Error if a token is not valid UTF-8 or the vocabulary cannot be expressed.
std::string to_tokenizer_json(const Vocabulary& vocab);
// tokenizer_config.json text: special token names, add_bos/add_eos, chat_template.
std::string to_tokenizer_config_json(const Vocabulary& vocab);
// Writes tokenizer.json and tokenizer_config.json into `folder` (created if missing).
void write_hf_tokenizer(const Vocabulary& vocab, const std::filesystem::path& folder);

}  // namespace steermoe::tokenizer
