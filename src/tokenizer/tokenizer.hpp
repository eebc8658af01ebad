// Byte-level BPE tokenizer (GPT-2 family: OLMoE, Qwen, Llama-3, DeepSeek-V3, Kimi-K2 vocabularies).
// Built from a Vocabulary (see vocabulary.hpp), loaded from tokenizer.json or GGUF metadata.
//
// encode(): added tokens are matched in the text first (leftmost-longest; user-defined ones
// always, control ones only when parse_special), the rest is split by the pre-tokenizer regexes,
// each piece is spelled with the GPT-2 byte map and merged by BPE rank. decode(): the inverse
// byte map for normal tokens, literal text for added tokens.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/pre_tokenizer.hpp"
#include "tokenizer/vocabulary.hpp"

namespace steermoe::tokenizer {

struct EncodeOptions {
  // Match control tokens (<|endoftext|>, <|im_start|>) typed in the text, as HF tokenizers
  // encode() does. false: they are ordinary text (llama.cpp parse_special=false).
  bool parse_special = true;
  // Prepend BOS / append EOS when the vocabulary asks for it (add_bos / add_eos).
  bool add_special = false;
  // Merge long words of few runs (10 MB of spaces) run by run: the same ids in linear time and
  // memory. false: every word symbol by symbol (the reference the tests compare with).
  bool merge_runs = true;
};

struct DecodeOptions {
  bool skip_special = false;  // drop control tokens from the output
  // Apply llama.cpp's detokenizer clean-up (llama_clean_spaces below), as llama.cpp does for
  // most BPE pre-tokenizers (gpt-2, olmo, llama-bpe); HF decode() does not.
  bool clean_spaces = false;
};

// llama.cpp's `clean_spaces` post-processing of detokenized text: removes the space before
// ? ! . , ; turns " ' " into "'"; removes the space before 's 'm 're 've.
std::string llama_clean_spaces(std::string_view text);

class Tokenizer {
 public:
  // Validates the vocabulary (ids, types, merges, special ids) and compiles the regexes.
  // Throws steermoe::Error naming vocab.source and the offending field.
  explicit Tokenizer(Vocabulary vocab);
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Loads from a `.gguf` file, a folder holding tokenizer.json (and optionally
  // tokenizer_config.json), or a tokenizer.json file.
  static Tokenizer load(const std::filesystem::path& path);

  // Throws steermoe::Error if `text` is not valid UTF-8.
  std::vector<TokenId> encode(std::string_view text, const EncodeOptions& options = {}) const;
  // Throws steermoe::Error for an id outside [0, size()).
  std::string decode(std::span<const TokenId> ids, const DecodeOptions& options = {}) const;
  // The bytes one token stands for.
  std::string token_bytes(TokenId id) const;

  size_t size() const { return vocab_.tokens.size(); }
  const Vocabulary& vocabulary() const { return vocab_; }
  // Id of a token by its stored spelling (byte-level for normal tokens, literal for added ones).
  std::optional<TokenId> find_token(std::string_view spelling) const;
  std::optional<TokenId> bos() const { return vocab_.bos_id; }
  std::optional<TokenId> eos() const { return vocab_.eos_id; }

 private:
  struct MergeResult {
    uint32_t rank;
    TokenId merged;
  };
  struct WordCache;

  void check_and_index();
  void encode_segment(std::string_view segment, std::vector<TokenId>& out, bool merge_runs) const;
  void encode_word(std::string_view word_bytes, std::vector<TokenId>& out, bool merge_runs) const;
  void bpe(const std::string& spelled, std::vector<TokenId>& out) const;
  // BPE over runs of one symbol (a long word of few distinct runs: 10 MB of spaces); false if
  // the word has too many runs for it to pay off or the merges are not in training order.
  bool bpe_runs(const std::string& spelled, std::vector<TokenId>& out) const;
  // Longest added token matching text at `pos`; nullopt if none.
  std::optional<TokenId> match_added(std::string_view text, size_t pos, bool parse_special) const;

  Vocabulary vocab_;
  PreTokenizer pre_tokenizer_;
  std::unordered_map<std::string, TokenId> token_to_id_;
  std::unordered_map<uint64_t, MergeResult> merges_;  // (left << 32 | right) -> rank, result
  // Every merge's result takes part only in merges ranked after it (as when merges are listed
  // in training order): then merging by rank, all places at once, is the merge loop's result.
  bool merges_in_training_order_ = false;
  // Added tokens by first byte, longest first.
  std::vector<std::vector<TokenId>> added_by_first_byte_;
  std::unique_ptr<WordCache> cache_;
};

}  // namespace steermoe::tokenizer
