// Regex pre-tokenization: the known split-regex families (GPT-2, Llama-3, Qwen2, DeepSeek-V3,
// Kimi-K2) under their llama.cpp names, and the PCRE2 (UTF + UCP) matcher that applies a
// sequence of SplitRules to text.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/vocabulary.hpp"

namespace steermoe::tokenizer {

// A pre-tokenizer family as llama.cpp names it in `tokenizer.ggml.pre`.
struct PreTokenizerFamily {
  std::string_view name;                   // canonical name written to GGUF
  std::vector<std::string_view> aliases;   // every llama.cpp name that selects this family
  std::vector<std::string_view> patterns;  // the split regexes, applied in order (Isolated)
  // Other spellings of the same regex sequence found in tokenizer.json files / llama.cpp tables
  // (e.g. GPT-2 without the trailing `|\s+`), used to recognise the family.
  std::vector<std::vector<std::string_view>> equivalent_patterns;
  bool ignore_merges = false;  // llama.cpp turns on ignore_merges for this family
  bool add_bos = false;        // llama.cpp's add_bos default when the GGUF does not say
};

const std::vector<PreTokenizerFamily>& pre_tokenizer_families();
// nullptr if the name is unknown.
const PreTokenizerFamily* find_family_by_name(std::string_view llama_name);
// The family whose regex sequence equals `splits` (all Isolated, not inverted); nullptr if none.
const PreTokenizerFamily* find_family_by_splits(const std::vector<SplitRule>& splits);
// "gpt-2, olmo, ..." for error messages.
std::string known_family_names();
std::vector<SplitRule> splits_of(const PreTokenizerFamily& family);

// The GPT-2 regex (implied by HF ByteLevel(use_regex=true)).
extern const std::string_view kGpt2Pattern;

// Rewrites constructs of upstream regex dialects (Rust `regex` / Python `regex`) that PCRE2 lacks:
// class intersection `[A&&[^B]]` becomes `(?:(?!B)[A])`.
std::string pcre_pattern(std::string_view upstream_pattern);

// A compiled PCRE2 pattern (UTF, UCP). Immutable after construction; safe to share between
// threads. Matching has a backtracking limit so a pathological pattern fails with an Error
// instead of hanging.
class Regex {
 public:
  // Throws steermoe::Error "<where>: <field>: invalid regex ... at offset N: <reason>".
  Regex(std::string_view pattern, const std::string& where, const std::string& field);
  // Appends the [begin, end) byte ranges of all non-overlapping, non-empty matches in `text`
  // (which must be valid UTF-8) to `out`.
  void find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const;
  const std::string& pattern() const { return pattern_; }

 private:
  struct Compiled;
  std::shared_ptr<const Compiled> compiled_;
  std::string pattern_;
};

// A compiled sequence of split steps.
//
// Long runs of one code point (10 MB of spaces, of 'a', of '7') are matched on a copy of the
// text in which each run is shortened to a few hundred code points, and the pieces of the
// removed middle are restored from the period the shortened run shows (a regex is a finite
// automaton: deep inside a run its pieces repeat). So the work and the regex engine's memory
// are linear in the text and bounded per match however long the run, where matching the run
// itself backtracks through all of it (the `\s*[\r\n]+` of Llama-3, Qwen2, DeepSeek-V3 and Kimi
// exceeds PCRE2's match limit on 10 MB of spaces; Kimi's letter classes overflow the JIT
// stack). When the shortened run shows no period the text is matched as it is.
class PreTokenizer {
 public:
  PreTokenizer() = default;
  PreTokenizer(const std::vector<SplitRule>& rules, const std::string& where);
  // Splits `text` (valid UTF-8) into pieces, as [begin, end) offsets into `text`, in order.
  // `shorten_runs` false: every run matched as it is (the reference the tests compare with);
  // `shortened`, if given, receives how many long runs were matched shortened.
  std::vector<std::pair<size_t, size_t>> split(std::string_view text, bool shorten_runs = true,
                                               size_t* shortened = nullptr) const;

 private:
  std::vector<std::pair<size_t, size_t>> split_as_is(std::string_view text) const;

  struct Step {
    Regex regex;
    SplitBehavior behavior;
    bool invert;
  };
  std::vector<Step> steps_;
};

}  // namespace steermoe::tokenizer
