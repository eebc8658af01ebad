// The plain description of a byte-level BPE tokenizer: what tokenizer.json and GGUF metadata
// both carry. Loaders fill it (hf_json.hpp, gguf_vocab.hpp), Tokenizer compiles it, writers
// serialise it again. Holds no compiled state, so it can be copied, compared and edited freely.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace steermoe::tokenizer {

using TokenId = int32_t;

// Token kinds, numbered as GGUF `tokenizer.ggml.token_type` (llama.cpp's llama_token_type).
enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,       // produced by BPE; text in GPT-2 byte-level spelling
  kUnknown = 2,      // the unk token
  kControl = 3,      // special added token (<|endoftext|>): matched only when parsing specials
  kUserDefined = 4,  // non-special added token: always matched in the text
  kUnused = 5,       // placeholder for an id nobody defined
  kByte = 6,
};

// An added token (control or user-defined) is matched in the raw text; its text is the literal
// content. Everything else is byte-level spelled.
inline bool is_added_type(TokenType type) {
  return type == TokenType::kControl || type == TokenType::kUserDefined;
}

// HF `tokenizers` SplitDelimiterBehavior: what happens to the regex matches of a Split step.
enum class SplitBehavior {
  kIsolated,            // matches and the text between them are separate pieces
  kRemoved,             // matches are dropped
  kMergedWithPrevious,  // a match is appended to the piece before it
  kMergedWithNext,      // a match starts the piece after it
  kContiguous,          // consecutive matches form one piece
};

// One regex split step of the pre-tokenizer, applied to every piece produced by the previous
// step. `pattern` is the upstream spelling (tokenizer.json / llama.cpp table); the compiler
// translates constructs PCRE2 lacks (class intersections) itself.
struct SplitRule {
  std::string pattern;
  SplitBehavior behavior = SplitBehavior::kIsolated;
  bool invert = false;  // HF `invert`: the pieces between matches play the role of matches
  bool operator==(const SplitRule&) const = default;
};

// HF added-token flags that change matching (absent from GGUF; defaults everywhere else).
struct AddedTokenOptions {
  bool lstrip = false;       // the match swallows whitespace on its left
  bool rstrip = false;       // the match swallows whitespace on its right
  bool single_word = false;  // matched only when not inside a word
  bool operator==(const AddedTokenOptions&) const = default;
};

struct Vocabulary {
  // Indexed by token id. Normal tokens are spelled with the GPT-2 byte-to-unicode map; added
  // tokens (control, user-defined) hold their literal text.
  std::vector<std::string> tokens;
  std::vector<TokenType> types;  // same size as tokens
  // BPE merges in rank order (rank 0 is applied first); both sides and their concatenation are
  // token strings.
  std::vector<std::pair<std::string, std::string>> merges;
  // Regex pre-tokenizer steps, in order; empty means the whole segment is one word.
  std::vector<SplitRule> splits;
  // llama.cpp's name for this pre-tokenizer (`tokenizer.ggml.pre`: "gpt-2", "qwen2", ...); empty
  // when the regexes match no family steermoe knows.
  std::string pre_name;
  // Prepend a space to each text segment that does not start with one (HF ByteLevel
  // add_prefix_space), before the split steps.
  bool add_prefix_space = false;
  // A word that is itself a token is emitted whole, without running merges (HF ignore_merges;
  // llama.cpp does it for the Llama-3 pre-tokenizer).
  bool ignore_merges = false;
  std::map<TokenId, AddedTokenOptions> added_token_options;  // only tokens with non-default flags

  std::optional<TokenId> bos_id;
  std::optional<TokenId> eos_id;
  std::optional<TokenId> pad_id;
  std::optional<TokenId> unk_id;
  bool add_bos = false;  // whether prompts get the BOS token prepended
  bool add_eos = false;
  std::string chat_template;  // Jinja source, empty if none

  // Where it came from ("<path>" or "<path> (GGUF)"); used in error messages.
  std::string source;

  bool operator==(const Vocabulary&) const = default;
};

}  // namespace steermoe::tokenizer
