#include "tokenizer/pre_tokenizer.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <optional>

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

// One JIT stack per thread (a stack must not be shared by concurrent matches), up to 8 MiB:
// PCRE2's default 32 KiB runs out on a few thousand letters of Kimi's class-intersection
// groups, which push a frame per character.
pcre2_jit_stack* thread_jit_stack(void*) {
  thread_local struct Holder {
    pcre2_jit_stack* stack = pcre2_jit_stack_create(32 << 10, 8 << 20, nullptr);
    ~Holder() { pcre2_jit_stack_free(stack); }
  } holder;
  return holder.stack;
}

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
  pcre2_jit_stack_assign(compiled->context, thread_jit_stack, nullptr);
  pcre2_set_match_limit(compiled->context, kMatchLimit);
  pcre2_set_depth_limit(compiled->context, kDepthLimit);
  compiled_ = std::move(compiled);
}

void Regex::find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const {
  if (text.empty()) return;
  pcre2_match_data* match = pcre2_match_data_create_from_pattern(compiled_->code, nullptr);
  SM_ASSERT(match != nullptr);
  // A long subject may need a backtracking budget in proportion (a match that scans a long
  // run and gives back one character): linear work, never exponential.
  pcre2_match_context* context = compiled_->context;
  pcre2_match_context* scaled = nullptr;
  if (text.size() > kMatchLimit / 8) {
    scaled = pcre2_match_context_copy(compiled_->context);
    SM_ASSERT(scaled != nullptr);
    pcre2_set_match_limit(scaled,
                          static_cast<uint32_t>(std::min<size_t>(text.size() * 8, UINT32_MAX)));
    context = scaled;
  }
  size_t offset = 0;
  while (offset < text.size()) {
    const int rc = pcre2_match(compiled_->code, reinterpret_cast<PCRE2_SPTR>(text.data()),
                               text.size(), offset, PCRE2_NO_UTF_CHECK, match, context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      pcre2_match_data_free(match);
      pcre2_match_context_free(scaled);
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
  pcre2_match_context_free(scaled);
}

// ---- PreTokenizer ----

PreTokenizer::PreTokenizer(const std::vector<SplitRule>& rules, const std::string& where) {
  for (size_t i = 0; i < rules.size(); ++i) {
    steps_.push_back({Regex(rules[i].pattern, where, "pre_tokenizer split " + std::to_string(i)),
                      rules[i].behavior, rules[i].invert});
  }
}

std::vector<std::pair<size_t, size_t>> PreTokenizer::split_as_is(std::string_view text) const {
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

// ---- long runs ----

namespace steermoe::tokenizer {

namespace {

using Pieces = std::vector<std::pair<size_t, size_t>>;

constexpr size_t kRunMin = 4096;  // code points: shorter runs are matched as they are
constexpr size_t kPeriod = 60;    // code points: lcm(1..6), a multiple of every repeat count
constexpr size_t kKeep = 600;     // code points kept of a long run (a multiple of kPeriod)

// A maximal run of one code point, with how it is shortened.
struct Run {
  size_t begin = 0, end = 0;  // bytes, in the text
  size_t unit = 1;            // bytes per code point
  size_t kept = 0;            // bytes kept (kKeep code points + the remainder mod kPeriod)
  size_t cut = 0;             // the cut, in the shortened text; the removed bytes go there
  Pieces period;              // pieces of one period before the cut (shortened text)
};

std::vector<Run> long_runs(std::string_view text) {
  std::vector<Run> runs;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t unit = std::max<size_t>(1, utf8_sequence_length(text, pos));
    size_t end = pos + unit;
    while (end + unit <= text.size() && text.compare(end, unit, text, pos, unit) == 0) end += unit;
    const size_t n = (end - pos) / unit;
    if (n >= kRunMin) runs.push_back({pos, end, unit, (kKeep + (n - kKeep) % kPeriod) * unit});
    pos = end;
  }
  return runs;
}

// The pieces inside [from, to), or nullopt if one crosses either end.
std::optional<Pieces> pieces_within(const Pieces& pieces, size_t from, size_t to) {
  Pieces out;
  for (const auto& [b, e] : pieces) {
    if (e <= from || b >= to) continue;
    if (b < from || e > to) return std::nullopt;
    out.emplace_back(b, e);
  }
  return out;
}

Pieces shifted(Pieces p, size_t by) {
  for (auto& [b, e] : p) {
    b += by;
    e += by;
  }
  return p;
}

// Where to cut a shortened run (`start` its first byte) so that the removed middle can be
// restored: a point near its middle that no piece crosses, with one period of pieces before it
// equal to the period before that and to the period after it. False if there is none.
bool find_cut(const Pieces& all, size_t start, Run& run) {
  const size_t period = kPeriod * run.unit;
  const size_t mid = start + (run.kept / run.unit / 2 / kPeriod) * period;
  // Only the pieces near the middle matter (pieces are in order and do not overlap).
  const auto first =
      std::lower_bound(all.begin(), all.end(), mid - 3 * period,
                       [](const auto& piece, size_t x) { return piece.second <= x; });
  Pieces pieces;
  for (auto it = first; it != all.end() && it->first < mid + 3 * period; ++it)
    pieces.push_back(*it);
  const size_t lo = mid - 2 * period, hi = mid + 2 * period;
  bool boundary = false;
  for (const auto& [b, e] : pieces) boundary = boundary || (b > lo && b < hi) || (e > lo && e < hi);
  if (!boundary) {
    // No piece boundary near the middle: one piece (or one dropped span) covers it and
    // stretches over what was removed.
    run.cut = mid;
    return true;
  }
  for (const auto& [b, e] : pieces) {
    if (e <= mid - period || b >= mid + period) continue;
    for (const size_t m : {b, e}) {
      if (m < mid - period || m > mid + period) continue;
      const auto before = pieces_within(pieces, m - period, m);
      const auto earlier = pieces_within(pieces, m - 2 * period, m - period);
      const auto after = pieces_within(pieces, m, m + period);
      if (before && earlier && after && shifted(*earlier, period) == *before &&
          shifted(*before, period) == *after) {
        run.cut = m;
        run.period = *before;
        return true;
      }
    }
  }
  return false;
}

}  // namespace

std::vector<std::pair<size_t, size_t>> PreTokenizer::split(std::string_view text, bool shorten_runs,
                                                           size_t* shortened) const {
  if (shortened) *shortened = 0;
  std::vector<Run> runs = shorten_runs ? long_runs(text) : std::vector<Run>{};
  if (runs.empty()) return split_as_is(text);
  // The text with each long run shortened, and the pieces of that.
  std::string short_text;
  std::vector<size_t> starts;  // each run's first byte in `shortened`
  size_t copied = 0;
  for (const Run& r : runs) {
    short_text.append(text.substr(copied, r.begin - copied));
    starts.push_back(short_text.size());
    short_text.append(text.substr(r.begin, r.kept));
    copied = r.end;
  }
  short_text.append(text.substr(copied));
  const Pieces pieces = split_as_is(short_text);
  for (size_t i = 0; i < runs.size(); ++i) {
    if (!find_cut(pieces, starts[i], runs[i])) return split_as_is(text);  // no period: as is
  }
  // Back to the text: positions after a cut move by the bytes removed there, and each removed
  // period gets the cut's period of pieces.
  Pieces out;
  out.reserve(pieces.size());
  size_t moved = 0;  // bytes removed before the current position
  size_t next = 0;   // the next run whose removed middle is not restored yet
  auto restore = [&](const Run& r) {
    const size_t removed = (r.end - r.begin) - r.kept;
    const size_t period = kPeriod * r.unit;
    for (size_t k = 1; k <= removed / period; ++k) {
      for (const auto& [b, e] : r.period)
        out.emplace_back(b + k * period + moved, e + k * period + moved);
    }
    moved += removed;
  };
  for (const auto& [b, e] : pieces) {
    while (next < runs.size() && b >= runs[next].cut) restore(runs[next++]);
    // A piece across a cut stretches over the removed middle.
    size_t end_moved = moved;
    for (size_t j = next; j < runs.size() && runs[j].cut < e; ++j) {
      end_moved += (runs[j].end - runs[j].begin) - runs[j].kept;
    }
    out.emplace_back(b + moved, e + end_moved);
  }
  while (next < runs.size()) restore(runs[next++]);
  if (shortened) *shortened = runs.size();
  return out;
}

}  // namespace steermoe::tokenizer
