#include "tokenizer/tokenizer.hpp"

#include <algorithm>
#include <mutex>
#include <queue>

#include "common/error.hpp"
#include "tokenizer/byte_level.hpp"

namespace steermoe::tokenizer {

// Words repeat a lot in real text; remembering their ids skips the merge loop. Bounded: cleared
// when full rather than evicting piecemeal (simple, and good enough for prompts).
struct Tokenizer::WordCache {
  static constexpr size_t kMaxEntries = 1 << 16;
  std::mutex mutex;
  std::unordered_map<std::string, std::vector<TokenId>> ids_by_word;
};

namespace {

constexpr size_t kMaxCachedWordBytes = 256;
// Words of at least this many symbols whose runs of one symbol are at most 1/16 of them are
// merged run by run (bpe_runs).
constexpr size_t kRunWordMin = 1024;

uint64_t pair_key(TokenId left, TokenId right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

bool is_ascii_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

// Rough "word character" test for single_word added tokens: ASCII alphanumerics, '_' and any
// non-ASCII byte (letters of other scripts).
bool is_word_byte(char c) {
  const auto u = static_cast<unsigned char>(c);
  return u >= 0x80 || (u >= '0' && u <= '9') || (u >= 'a' && u <= 'z') || (u >= 'A' && u <= 'Z') ||
         u == '_';
}

// True if every merge's result takes part only in merges ranked after it.
template <typename Merges>
bool in_training_order(const Merges& merges) {
  std::unordered_map<TokenId, uint32_t> first_use;  // token -> lowest rank of a merge using it
  for (const auto& [key, m] : merges) {
    for (const TokenId side :
         {static_cast<TokenId>(key >> 32), static_cast<TokenId>(key & 0xffffffffu)}) {
      const auto [it, added] = first_use.emplace(side, m.rank);
      if (!added) it->second = std::min(it->second, m.rank);
    }
  }
  return std::all_of(merges.begin(), merges.end(), [&](const auto& kv) {
    const auto it = first_use.find(kv.second.merged);
    return it == first_use.end() || it->second > kv.second.rank;
  });
}

struct SymbolRun {
  TokenId id;  // -1: a character the vocabulary cannot spell
  uint64_t n;
};

// One merge (left, right) -> merged at every place at once, leftmost first where places overlap.
std::vector<SymbolRun> merge_everywhere(const std::vector<SymbolRun>& runs, TokenId left,
                                        TokenId right, TokenId merged) {
  std::vector<SymbolRun> next;
  const auto push = [&](TokenId id, uint64_t n) {
    if (n == 0) return;
    if (!next.empty() && next.back().id == id) {
      next.back().n += n;
    } else {
      next.push_back({id, n});
    }
  };
  uint64_t taken = 0;  // symbols of the current run already merged with the run before
  for (size_t i = 0; i < runs.size(); ++i) {
    const SymbolRun r{runs[i].id, runs[i].n - taken};
    taken = 0;
    if (left == right && r.id == left) {
      push(merged, r.n / 2);  // "a a a" -> "aa a"
      push(left, r.n % 2);
    } else if (left != right && r.id == left && i + 1 < runs.size() && runs[i + 1].id == right) {
      push(left, r.n - 1);  // the run's last symbol and the next run's first merge
      push(merged, 1);
      taken = 1;
    } else {
      push(r.id, r.n);
    }
  }
  return next;
}

}  // namespace

Tokenizer::Tokenizer(Vocabulary vocab)
    : vocab_(std::move(vocab)), cache_(std::make_unique<WordCache>()) {
  check_and_index();
  pre_tokenizer_ = PreTokenizer(vocab_.splits, vocab_.source);
}

Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

void Tokenizer::check_and_index() {
  const std::string& where = vocab_.source.empty() ? std::string("vocabulary") : vocab_.source;
  const size_t n = vocab_.tokens.size();
  if (n == 0) fail(where, "tokens", "expected at least one token, found none");
  if (n > static_cast<size_t>(INT32_MAX))
    fail(where, "tokens", "expected fewer than 2^31 tokens, found {}", n);
  if (vocab_.types.size() != n)
    fail(where, "token types", "expected one type per token ({}), found {}", n,
         vocab_.types.size());

  token_to_id_.reserve(n);
  added_by_first_byte_.assign(256, {});
  for (size_t i = 0; i < n; ++i) {
    const std::string& text = vocab_.tokens[i];
    const auto id = static_cast<TokenId>(i);
    const int32_t type = static_cast<int32_t>(vocab_.types[i]);
    if (type < 0 || type > static_cast<int32_t>(TokenType::kByte))
      fail(where, "token types", "token {}: expected a type 0..6, found {}", i, type);
    if (text.empty()) fail(where, "tokens", "token {}: expected a non-empty string", i);
    const auto [it, inserted] = token_to_id_.emplace(text, id);
    if (!inserted)
      fail(where, "tokens", "token {} '{}': expected unique token strings, also used by token {}",
           i, text, it->second);
    if (is_added_type(vocab_.types[i])) {
      added_by_first_byte_[static_cast<unsigned char>(text[0])].push_back(id);
    }
  }
  for (auto& candidates : added_by_first_byte_) {
    std::stable_sort(candidates.begin(), candidates.end(), [&](TokenId a, TokenId b) {
      return vocab_.tokens[a].size() > vocab_.tokens[b].size();
    });
  }

  merges_.reserve(vocab_.merges.size());
  for (size_t rank = 0; rank < vocab_.merges.size(); ++rank) {
    // Named references, not a structured binding: clang 14 cannot capture those in lambdas.
    const std::string& left = vocab_.merges[rank].first;
    const std::string& right = vocab_.merges[rank].second;
    const auto find_side = [&](const std::string& side) {
      const auto it = token_to_id_.find(side);
      if (it == token_to_id_.end())
        fail(where, "merges",
             "merge {} '{} {}': expected known tokens, '{}' is not in the vocabulary", rank, left,
             right, side);
      return it->second;
    };
    const TokenId left_id = find_side(left);
    const TokenId right_id = find_side(right);
    const TokenId merged_id = find_side(left + right);
    // A repeated pair keeps its first (best) rank, as HF and llama.cpp do.
    merges_.emplace(pair_key(left_id, right_id),
                    MergeResult{static_cast<uint32_t>(rank), merged_id});
  }

  merges_in_training_order_ = in_training_order(merges_);

  const auto check_special = [&](const std::optional<TokenId>& id, const char* name) {
    if (id && (*id < 0 || static_cast<size_t>(*id) >= n))
      fail(where, name, "expected a token id below {}, found {}", n, *id);
  };
  check_special(vocab_.bos_id, "bos token id");
  check_special(vocab_.eos_id, "eos token id");
  check_special(vocab_.pad_id, "padding token id");
  check_special(vocab_.unk_id, "unknown token id");
  if (vocab_.add_bos && !vocab_.bos_id) fail(where, "add_bos", "is set but there is no bos token");
  if (vocab_.add_eos && !vocab_.eos_id) fail(where, "add_eos", "is set but there is no eos token");
  for (const auto& [id, options] : vocab_.added_token_options) {
    if (id < 0 || static_cast<size_t>(id) >= n || !is_added_type(vocab_.types[id]))
      fail(where, "added token options", "token {}: expected the id of an added token", id);
  }
}

std::optional<TokenId> Tokenizer::find_token(std::string_view spelling) const {
  const auto it = token_to_id_.find(std::string(spelling));
  if (it == token_to_id_.end()) return std::nullopt;
  return it->second;
}

std::optional<TokenId> Tokenizer::match_added(std::string_view text, size_t pos,
                                              bool parse_special) const {
  for (TokenId id : added_by_first_byte_[static_cast<unsigned char>(text[pos])]) {
    if (vocab_.types[id] == TokenType::kControl && !parse_special) continue;
    const std::string& content = vocab_.tokens[id];
    if (text.compare(pos, content.size(), content) != 0) continue;
    if (const auto it = vocab_.added_token_options.find(id);
        it != vocab_.added_token_options.end() && it->second.single_word) {
      const size_t end = pos + content.size();
      if ((pos > 0 && is_word_byte(text[pos - 1])) ||
          (end < text.size() && is_word_byte(text[end])))
        continue;
    }
    return id;
  }
  return std::nullopt;
}

std::vector<TokenId> Tokenizer::encode(std::string_view text, const EncodeOptions& options) const {
  if (const auto bad = find_invalid_utf8(text))
    fail("text", "encoding", "expected valid UTF-8, found invalid byte 0x{:02x} at offset {}",
         static_cast<unsigned char>(text[*bad]), *bad);
  std::vector<TokenId> out;
  if (options.add_special && vocab_.add_bos) out.push_back(*vocab_.bos_id);

  size_t segment_begin = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    const std::optional<TokenId> id = match_added(text, pos, options.parse_special);
    if (!id) {
      pos += utf8_sequence_length(text, pos);
      continue;
    }
    size_t match_begin = pos;
    size_t match_end = pos + vocab_.tokens[*id].size();
    if (const auto it = vocab_.added_token_options.find(*id);
        it != vocab_.added_token_options.end()) {
      if (it->second.lstrip)
        while (match_begin > segment_begin && is_ascii_space(text[match_begin - 1])) --match_begin;
      if (it->second.rstrip)
        while (match_end < text.size() && is_ascii_space(text[match_end])) ++match_end;
    }
    encode_segment(text.substr(segment_begin, match_begin - segment_begin), out,
                   options.merge_runs);
    out.push_back(*id);
    segment_begin = pos = match_end;
  }
  encode_segment(text.substr(segment_begin), out, options.merge_runs);

  if (options.add_special && vocab_.add_eos) out.push_back(*vocab_.eos_id);
  return out;
}

void Tokenizer::encode_segment(std::string_view segment, std::vector<TokenId>& out,
                               bool merge_runs) const {
  if (segment.empty()) return;
  std::string with_prefix;
  if (vocab_.add_prefix_space && segment.front() != ' ') {
    with_prefix.reserve(segment.size() + 1);
    with_prefix += ' ';
    with_prefix += segment;
    segment = with_prefix;
  }
  for (const auto& [begin, end] : pre_tokenizer_.split(segment))
    encode_word(segment.substr(begin, end - begin), out, merge_runs);
}

void Tokenizer::encode_word(std::string_view word_bytes, std::vector<TokenId>& out,
                            bool merge_runs) const {
  const std::string spelled = to_byte_level(word_bytes);
  {
    std::lock_guard lock(cache_->mutex);
    if (const auto it = cache_->ids_by_word.find(spelled); it != cache_->ids_by_word.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<TokenId> ids;
  if (!merge_runs || !bpe_runs(spelled, ids)) bpe(spelled, ids);
  out.insert(out.end(), ids.begin(), ids.end());
  // Long words are not kept: one 10 MB word would stay in memory as the cache key.
  if (spelled.size() > kMaxCachedWordBytes) return;
  std::lock_guard lock(cache_->mutex);
  if (cache_->ids_by_word.size() >= WordCache::kMaxEntries) cache_->ids_by_word.clear();
  cache_->ids_by_word.emplace(spelled, std::move(ids));
}

void Tokenizer::bpe(const std::string& spelled, std::vector<TokenId>& out) const {
  // BPE looks words up among model tokens only: an added token's text typed in a word is
  // plain text here (added tokens were matched before, or deliberately not).
  const auto lookup = [&](std::string_view piece) -> TokenId {
    const auto it = token_to_id_.find(std::string(piece));
    if (it == token_to_id_.end() || is_added_type(vocab_.types[it->second])) return -1;
    return it->second;
  };
  if (vocab_.ignore_merges) {
    if (const TokenId whole = lookup(spelled); whole >= 0) {
      out.push_back(whole);
      return;
    }
  }

  struct Symbol {
    TokenId id;
    int prev;
    int next;
  };
  std::vector<Symbol> symbols;
  for (size_t pos = 0; pos < spelled.size();) {
    const size_t length = std::max<size_t>(1, utf8_sequence_length(spelled, pos));
    const int index = static_cast<int>(symbols.size());
    symbols.push_back(
        {lookup(std::string_view(spelled).substr(pos, length)), index - 1, index + 1});
    pos += length;
  }
  if (symbols.empty()) return;
  symbols.back().next = -1;

  struct Candidate {
    uint32_t rank;
    int left;
    int right;
    TokenId left_id;
    TokenId right_id;
    TokenId merged;
    // Lowest rank first; among equal ranks the leftmost pair (HF and llama.cpp agree).
    bool operator>(const Candidate& other) const {
      return rank != other.rank ? rank > other.rank : left > other.left;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  const auto consider = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    const TokenId a = symbols[left].id;
    const TokenId b = symbols[right].id;
    if (a < 0 || b < 0) return;
    const auto it = merges_.find(pair_key(a, b));
    if (it != merges_.end()) queue.push({it->second.rank, left, right, a, b, it->second.merged});
  };
  for (int i = 0; i + 1 < static_cast<int>(symbols.size()); ++i) consider(i, i + 1);

  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[top.left];
    Symbol& right = symbols[top.right];
    // Stale entries: either side merged since the candidate was queued.
    if (left.next != top.right || left.id != top.left_id || right.id != top.right_id) continue;
    left.id = top.merged;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = top.left;
    right.id = -2;  // dead
    right.prev = right.next = -1;
    consider(left.prev, top.left);
    consider(top.left, left.next);
  }

  for (int i = 0; i >= 0; i = symbols[i].next) {
    if (symbols[i].id >= 0) {
      out.push_back(symbols[i].id);
    } else if (vocab_.unk_id) {
      out.push_back(*vocab_.unk_id);  // a character the vocabulary cannot spell
    }
  }
}

bool Tokenizer::bpe_runs(const std::string& spelled, std::vector<TokenId>& out) const {
  if (!merges_in_training_order_ || spelled.size() < kRunWordMin || vocab_.ignore_merges) {
    return false;
  }
  // The word as runs of one character.
  std::vector<SymbolRun> runs;
  size_t symbols = 0;
  for (size_t pos = 0; pos < spelled.size();) {
    const size_t length = std::max<size_t>(1, utf8_sequence_length(spelled, pos));
    size_t end = pos + length;
    uint64_t n = 1;
    while (end + length <= spelled.size() &&
           spelled.compare(end, length, spelled, pos, length) == 0) {
      end += length;
      ++n;
    }
    const auto it = token_to_id_.find(spelled.substr(pos, length));
    const TokenId id =
        it == token_to_id_.end() || is_added_type(vocab_.types[it->second]) ? -1 : it->second;
    runs.push_back({id, n});
    symbols += n;
    if (runs.size() * 16 > std::max(symbols, kRunWordMin)) return false;  // not run-like
    pos = end;
  }
  // Merge by rank: the lowest-ranked pair present, at every place at once, which is what the
  // merge loop does when results only merge later (merges_in_training_order_).
  for (;;) {
    const MergeResult* best = nullptr;
    TokenId left = -1, right = -1;
    const auto consider = [&](TokenId a, TokenId b) {
      if (a < 0 || b < 0) return;
      const auto it = merges_.find(pair_key(a, b));
      if (it != merges_.end() && (!best || it->second.rank < best->rank)) {
        best = &it->second;
        left = a;
        right = b;
      }
    };
    for (size_t i = 0; i < runs.size(); ++i) {
      if (runs[i].n >= 2) consider(runs[i].id, runs[i].id);
      if (i + 1 < runs.size()) consider(runs[i].id, runs[i + 1].id);
    }
    if (!best) break;
    runs = merge_everywhere(runs, left, right, best->merged);
  }
  for (const SymbolRun& r : runs) {
    if (r.id < 0 && !vocab_.unk_id) continue;  // a character the vocabulary cannot spell
    out.insert(out.end(), r.n, r.id >= 0 ? r.id : *vocab_.unk_id);
  }
  return true;
}

std::string Tokenizer::token_bytes(TokenId id) const {
  if (id < 0 || static_cast<size_t>(id) >= size())
    fail("ids", "token id", "expected an id in [0, {}), found {}", size(), id);
  if (is_added_type(vocab_.types[id])) return vocab_.tokens[id];
  return from_byte_level(vocab_.tokens[id]);
}

std::string llama_clean_spaces(std::string_view text) {
  if (text.empty()) return {};
  // Three passes over bytes, each looking at its input's neighbours (not at what it already
  // removed), which is how llama.cpp's in-place loops behave.
  std::string first(1, text[0]);
  for (size_t i = 1; i < text.size(); ++i) {
    const char x = text[i];
    if (text[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ',')) first.pop_back();
    first.push_back(x);
  }
  // " ' " -> "'": both spaces go; the byte after the removed right space sees no space before it.
  std::string second(1, first[0]);
  size_t blanked = std::string::npos;
  for (size_t i = 1; i < first.size(); ++i) {
    const char x = first[i];
    const char before = (i - 1 == blanked) ? '\0' : first[i - 1];
    if (x == '\'' && i + 1 < first.size() && before == ' ' && first[i + 1] == ' ') {
      second.pop_back();
      second.push_back(x);
      blanked = ++i;
      continue;
    }
    second.push_back(x);
  }
  std::string third(1, second[0]);
  for (size_t i = 1; i < second.size(); ++i) {
    const char x = second[i];
    if (second[i - 1] == ' ' && x == '\'' && i + 1 < second.size()) {
      const char x1 = second[i + 1];
      const char x2 = i + 2 < second.size() ? second[i + 2] : '\0';
      const bool joins =
          x1 == 's' || x1 == 'm' || (x1 == 'r' && x2 == 'e') || (x1 == 'v' && x2 == 'e');
      if (joins) third.pop_back();
    }
    third.push_back(x);
  }
  return third;
}

std::string Tokenizer::decode(std::span<const TokenId> ids, const DecodeOptions& options) const {
  std::string out;
  for (TokenId id : ids) {
    if (id < 0 || static_cast<size_t>(id) >= size())
      fail("ids", "token id", "expected an id in [0, {}), found {}", size(), id);
    if (options.skip_special && vocab_.types[id] == TokenType::kControl) continue;
    out += token_bytes(id);
  }
  return options.clean_spaces ? llama_clean_spaces(out) : out;
}

}  // namespace steermoe::tokenizer
