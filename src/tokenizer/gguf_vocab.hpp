// The tokenizer as GGUF metadata (llama.cpp keys `tokenizer.ggml.*`): reading a Vocabulary from a
// GGUF file and producing the key/values that describe one (for `steermoe convert`).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "model/gguf.hpp"
#include "tokenizer/vocabulary.hpp"

namespace steermoe::tokenizer {

// Reads tokenizer.ggml.{model,pre,tokens,token_type,merges,bos_token_id,eos_token_id,
// padding_token_id,unknown_token_id,add_bos_token,add_eos_token} and tokenizer.chat_template.
// The model must be "gpt2" (byte-level BPE); `pre` must name a known family
// (see pre_tokenizer.hpp). Throws steermoe::Error "<file>: <key>: <what was expected>".
Vocabulary vocabulary_from_gguf(const model::GgufFile& file);

// The metadata that describes `vocab`, in the order llama.cpp's converter writes it:
// tokenizer.ggml.model "gpt2", .pre, .tokens, .token_type (int32), .merges ("a b"), the special
// ids present (uint32), add_bos_token / add_eos_token (bool), tokenizer.chat_template if any.
// Throws steermoe::Error if the vocabulary has no llama.cpp pre-tokenizer name or a merge side
// contains a space (not representable as "a b").
std::vector<std::pair<std::string, model::GgufValue>> gguf_metadata(const Vocabulary& vocab);

}  // namespace steermoe::tokenizer
