#include "tokenizer/pre_tokenizer.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>

#include "common/error.hpp"
#include "tokenizer/byte_level.hpp"

namespace steermoe::tokenizer {

const std::string_view kGpt2Pattern =
    R"re('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)re";

namespace {

// llama.cpp's table omits the final `|\s+`; it changes nothing because text no alternative
// matches still becomes its own piece.
constexpr std::string_view kGpt2PatternLlamaCpp =
    R"re('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))re";
constexpr std::string_view kLlama3Pattern =
    R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
constexpr std::string_view kLlama3PatternLlamaCpp =
    R"re((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
constexpr std::string_view kQwen2Pattern =
    R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
constexpr std::string_view kQwen2PatternLlamaCpp =
    R"re((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
constexpr std::string_view kDeepseekV3Digits = R"re(\p{N}{1,3})re";
constexpr std::string_view kDeepseekV3Cjk = "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+";
constexpr std::string_view kDeepseekV3Main =
    R"re([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
// Moonshot's tokenization_kimi.py (tiktoken); llama.cpp hand-codes it behind "\p{Han}+".
constexpr std::string_view kKimiK2Pattern =
    R"re([\p{Han}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";

// Backtracking budget per match call: generous for real text, finite for hostile patterns.
constexpr uint32_t kMatchLimit = 10'000'000;
constexpr uint32_t kDepthLimit = 100'000;

}  // namespace

const std::vector<PreTokenizerFamily>& pre_tokenizer_families() {
  static const std::vector<PreTokenizerFamily> families = {
      {.name = "gpt-2",
       .aliases = {"gpt-2", "olmo", "phi-2", "mpt", "jais", "roberta-bpe", "jina-es", "jina-de",
                   "gigachat", "jina-v1-en", "jina-v2-es", "jina-v2-de", "jina-v2-code", "trillion",
                   "granite-docling", "exaone4"},
       .patterns = {kGpt2Pattern},
       .equivalent_patterns = {{kGpt2PatternLlamaCpp}}},
      {.name = "llama-bpe",
       .aliases = {"llama-bpe", "llama3", "llama-v3", "falcon3", "dbrx", "smaug-bpe"},
       .patterns = {kLlama3Pattern},
       .equivalent_patterns = {{kLlama3PatternLlamaCpp}},
       .ignore_merges = true,
       .add_bos = true},
      {.name = "qwen2",
       .aliases = {"qwen2", "deepseek-r1-qwen", "megrez", "stablelm2", "hunyuan", "grok-2"},
       .patterns = {kQwen2Pattern},
       .equivalent_patterns = {{kQwen2PatternLlamaCpp}}},
      {.name = "deepseek-v3",
       .aliases = {"deepseek-v3", "hunyuan-dense"},
       .patterns = {kDeepseekV3Digits, kDeepseekV3Cjk, kDeepseekV3Main}},
      {.name = "kimi-k2", .aliases = {"kimi-k2"}, .patterns = {kKimiK2Pattern}},
  };
  return families;
}

const PreTokenizerFamily* find_family_by_name(std::string_view llama_name) {
  for (const PreTokenizerFamily& family : pre_tokenizer_families()) {
    if (std::find(family.aliases.begin(), family.aliases.end(), llama_name) != family.aliases.end())
      return &family;
  }
  return nullptr;
}

const PreTokenizerFamily* find_family_by_splits(const std::vector<SplitRule>& splits) {
  const auto same = [&](const std::vector<std::string_view>& patterns) {
    if (patterns.size() != splits.size()) return false;
    for (size_t i = 0; i < splits.size(); ++i) {
      if (splits[i].behavior != SplitBehavior::kIsolated || splits[i].invert ||
          splits[i].pattern != patterns[i])
        return false;
    }
    return true;
  };
  for (const PreTokenizerFamily& family : pre_tokenizer_families()) {
    if (same(family.patterns)) return &family;
    for (const auto& alternative : family.equivalent_patterns)
      if (same(alternative)) return &family;
  }
  return nullptr;
}

std::string known_family_names() {
  std::string names;
  for (const PreTokenizerFamily& family : pre_tokenizer_families()) {
    for (std::string_view alias : family.aliases) {
      if (!names.empty()) names += ", ";
      names += alias;
    }
  }
  return names;
}

std::vector<SplitRule> splits_of(const PreTokenizerFamily& family) {
  std::vector<SplitRule> rules;
  for (std::string_view pattern : family.patterns) rules.push_back({std::string(pattern)});
  return rules;
}

std::string pcre_pattern(std::string_view upstream) {
  std::string out(upstream);
  // `[A&&[^B]]` (A and B without nested brackets, as in the Kimi pattern) -> `(?:(?![B])[A])`.
  size_t search_from = 0;
  while (true) {
    const size_t amp = out.find("&&[^", search_from);
    if (amp == std::string::npos) break;
    const size_t b_end = out.find(']', amp + 4);
    size_t open = amp;
    while (open > 0 && !(out[open - 1] == '[' && (open < 2 || out[open - 2] != '\\'))) --open;
    if (b_end == std::string::npos || b_end + 1 >= out.size() || out[b_end + 1] != ']' ||
        open == 0) {
      search_from = amp + 2;
      continue;
    }
    const std::string a = out.substr(open, amp - open);
    const std::string b = out.substr(amp + 4, b_end - (amp + 4));
    const std::string replacement = "(?:(?![" + b + "])[" + a + "])";
    out.replace(open - 1, b_end + 2 - (open - 1), replacement);
    search_from = open - 1 + replacement.size();
  }
  return out;
}

// ---- Regex ----

struct Regex::Compiled {
  pcre2_code* code = nullptr;
  pcre2_match_context* context = nullptr;
  std::string where;
  std::string field;
  ~Compiled() {
    pcre2_match_context_free(context);
    pcre2_code_free(code);
  }
};

Regex::Regex(std::string_view pattern, const std::string& where, const std::string& field)
    : pattern_(pattern) {
  const std::string translated = pcre_pattern(pattern);
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  auto compiled = std::make_shared<Compiled>();
  compiled->where = where;
  compiled->field = field;
  compiled->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                                 PCRE2_UTF | PCRE2_UCP, &error_code, &error_offset, nullptr);
  if (compiled->code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error_code, message, sizeof(message));
    fail(where, field, "expected a valid regex, PCRE2 rejects '{}' at offset {}: {}", pattern,
         error_offset, reinterpret_cast<const char*>(message));
  }
  // JIT is only a speed-up; the interpreter is used if it is unavailable.
  pcre2_jit_compile(compiled->code, PCRE2_JIT_COMPLETE);
  compiled->context = pcre2_match_context_create(nullptr);
  SM_ASSERT(compiled->context != nullptr);
  pcre2_set_match_limit(compiled->context, kMatchLimit);
  pcre2_set_depth_limit(compiled->context, kDepthLimit);
  compiled_ = std::move(compiled);
}

void Regex::find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const {
  if (text.empty()) return;
  pcre2_match_data* match = pcre2_match_data_create_from_pattern(compiled_->code, nullptr);
  SM_ASSERT(match != nullptr);
  size_t offset = 0;
  while (offset < text.size()) {
    const int rc = pcre2_match(compiled_->code, reinterpret_cast<PCRE2_SPTR>(text.data()),
                               text.size(), offset, PCRE2_NO_UTF_CHECK, match, compiled_->context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      pcre2_match_data_free(match);
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(rc, message, sizeof(message));
      fail(compiled_->where, compiled_->field, "regex '{}' failed while matching: {}", pattern_,
           reinterpret_cast<const char*>(message));
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match);
    const size_t begin = ovector[0];
    const size_t end = ovector[1];
    if (end > begin && begin >= offset) {
      out.emplace_back(begin, end);
      offset = end;
    } else {
      // Empty match: move on by one character (an empty piece is never emitted).
      const size_t at = std::max(begin, offset);
      if (at >= text.size()) break;
      offset = at + std::max<size_t>(1, utf8_sequence_length(text, at));
    }
  }
  pcre2_match_data_free(match);
}

// ---- PreTokenizer ----

PreTokenizer::PreTokenizer(const std::vector<SplitRule>& rules, const std::string& where) {
  for (size_t i = 0; i < rules.size(); ++i) {
    steps_.push_back({Regex(rules[i].pattern, where, "pre_tokenizer split " + std::to_string(i)),
                      rules[i].behavior, rules[i].invert});
  }
}

std::vector<std::pair<size_t, size_t>> PreTokenizer::split(std::string_view text) const {
  std::vector<std::pair<size_t, size_t>> pieces;
  if (!text.empty()) pieces.emplace_back(0, text.size());
  std::vector<std::pair<size_t, size_t>> matches;
  for (const Step& step : steps_) {
    std::vector<std::pair<size_t, size_t>> next;
    for (const auto& [piece_begin, piece_end] : pieces) {
      matches.clear();
      step.regex.find_all(text.substr(piece_begin, piece_end - piece_begin), matches);
      // Spans covering the piece: (begin, end, is_delimiter).
      struct Span {
        size_t begin, end;
        bool delimiter;
      };
      std::vector<Span> spans;
      size_t cursor = 0;
      for (const auto& [b, e] : matches) {
        if (b > cursor) spans.push_back({cursor, b, step.invert});
        spans.push_back({b, e, !step.invert});
        cursor = e;
      }
      if (cursor < piece_end - piece_begin)
        spans.push_back({cursor, piece_end - piece_begin, step.invert});

      bool last_was_delimiter = false;
      bool last_open_for_next = false;
      const size_t first_new = next.size();
      for (const Span& span : spans) {
        const size_t b = piece_begin + span.begin;
        const size_t e = piece_begin + span.end;
        const bool have_last = next.size() > first_new;
        switch (step.behavior) {
          case SplitBehavior::kIsolated:
            next.emplace_back(b, e);
            break;
          case SplitBehavior::kRemoved:
            if (!span.delimiter) next.emplace_back(b, e);
            break;
          case SplitBehavior::kMergedWithPrevious:
            if (span.delimiter && have_last && !last_was_delimiter) {
              next.back().second = e;
            } else {
              next.emplace_back(b, e);
            }
            break;
          case SplitBehavior::kMergedWithNext:
            if (!span.delimiter && have_last && last_open_for_next) {
              next.back().second = e;
            } else {
              next.emplace_back(b, e);
            }
            last_open_for_next = span.delimiter;
            break;
          case SplitBehavior::kContiguous:
            if (span.delimiter && have_last && last_was_delimiter) {
              next.back().second = e;
            } else {
              next.emplace_back(b, e);
            }
            break;
        }
        last_was_delimiter = span.delimiter;
      }
    }
    pieces = std::move(next);
  }
  return pieces;
}

}  // namespace steermoe::tokenizer
