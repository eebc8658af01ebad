#include "trace/calibration_file.hpp"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <fstream>

#include "common/error.hpp"
#include "common/mapped_file.hpp"
#include "common/output_file.hpp"

namespace steermoe::trace {
namespace {

constexpr uint32_t kMaxLayers = 4096;
constexpr uint32_t kMaxExperts = 65535;
constexpr size_t kHeaderBytes = 40;
constexpr size_t kEntryBytes = 6;  // u16 expert, u32 count

class ByteWriter {
 public:
  template <typename T>
  void put(T value) {
    static_assert(std::is_trivially_copyable_v<T>);
    uint8_t raw[sizeof(T)];
    std::memcpy(raw, &value,
                sizeof(T));  // the format is little-endian, like every host we build for
    bytes.insert(bytes.end(), raw, raw + sizeof(T));
  }
  std::vector<uint8_t> bytes;
};

class ByteReader {
 public:
  ByteReader(std::span<const uint8_t> bytes, const std::string& where)
      : bytes_(bytes), where_(where) {}
  template <typename T>
  T get(const std::string& field) {
    need(sizeof(T), 1, field);
    T value;
    std::memcpy(&value, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return value;
  }
  // Throws unless `count` items of `size` bytes remain (checked before anything is allocated).
  void need(uint64_t size, uint64_t count, const std::string& field) const {
    const uint64_t left = bytes_.size() - pos_;
    if (count > left / size)
      fail(where_, field,
           "expected {} items of {} bytes, but only {} bytes remain (truncated file?)", count, size,
           left);
  }
  size_t left() const { return bytes_.size() - pos_; }

 private:
  std::span<const uint8_t> bytes_;
  const std::string& where_;
  size_t pos_ = 0;
};

}  // namespace

std::vector<uint8_t> encode_calibration(const policy::Calibration& calibration) {
  const policy::Calibration& c = calibration;
  const policy::TokenPrior& prior = c.prior;
  SM_ASSERT(c.layers > 0 && c.experts > 0 && static_cast<uint32_t>(c.experts) <= kMaxExperts);
  SM_ASSERT(prior.vocab >= 0 && (prior.occurrences.size() == static_cast<size_t>(prior.vocab)));
  const bool has_prior = !prior.row_begin.empty();
  std::vector<uint32_t> seen;
  for (int x = 0; x < prior.vocab; ++x)
    if (prior.occurrences[static_cast<size_t>(x)] > 0) seen.push_back(static_cast<uint32_t>(x));

  ByteWriter out;
  for (char ch : kCalibrationMagic) out.put(ch);
  out.put(kCalibrationVersion);
  out.put(static_cast<uint32_t>(c.layers));
  out.put(static_cast<uint32_t>(c.experts));
  out.put(static_cast<uint32_t>(c.top_k));
  out.put(static_cast<uint32_t>(prior.vocab));
  out.put(static_cast<uint32_t>(seen.size()));
  out.put(c.steps);
  SM_ASSERT(out.bytes.size() == kHeaderBytes);
  for (int l = 0; l < c.layers; ++l) {
    for (uint64_t count : c.expert_counts[static_cast<size_t>(l)]) out.put(count);
    for (int32_t e : c.expert_order[static_cast<size_t>(l)]) out.put(e);
    out.put(c.score_range[static_cast<size_t>(l)]);
  }
  for (uint32_t x : seen) {
    out.put(x);
    out.put(prior.occurrences[x]);
  }
  for (int l = 0; l < c.layers; ++l)
    for (uint32_t x : seen)
      out.put(static_cast<uint32_t>(has_prior ? prior.row(l, static_cast<int32_t>(x)).size() : 0));
  for (int l = 0; l < c.layers; ++l) {
    for (uint32_t x : seen) {
      if (!has_prior) continue;
      for (const policy::PriorEntry& entry : prior.row(l, static_cast<int32_t>(x))) {
        out.put(entry.expert);
        out.put(entry.count);
      }
    }
  }
  return std::move(out.bytes);
}

policy::Calibration decode_calibration(std::span<const uint8_t> bytes, const std::string& where,
                                       const CalibrationLimits& limits) {
  ByteReader in(bytes, where);
  in.need(kHeaderBytes, 1, "header");
  char magic[8];
  for (char& ch : magic) ch = in.get<char>("magic");
  if (std::memcmp(magic, kCalibrationMagic, sizeof(magic)) != 0)
    fail(where, "magic", "expected a steermoe calibration file starting with \"SMCALIB\\0\"");
  const auto version = in.get<uint32_t>("version");
  if (version != kCalibrationVersion)
    fail(where, "version", "expected {}, found {}", kCalibrationVersion, version);
  const auto layers = in.get<uint32_t>("layers");
  const auto experts = in.get<uint32_t>("experts");
  const auto top_k = in.get<uint32_t>("top_k");
  const auto vocab = in.get<uint32_t>("vocab");
  const auto seen_count = in.get<uint32_t>("seen_tokens");
  const auto steps = in.get<uint64_t>("steps");
  if (layers < 1 || layers > kMaxLayers)
    fail(where, "layers", "expected 1..{}, found {}", kMaxLayers, layers);
  if (experts < 1 || experts > kMaxExperts)
    fail(where, "experts", "expected 1..{}, found {}", kMaxExperts, experts);
  if (top_k < 1 || top_k > experts)
    fail(where, "top_k", "expected 1..experts = {}, found {}", experts, top_k);
  if (vocab > static_cast<uint32_t>(INT32_MAX))
    fail(where, "vocab", "expected at most {}, found {}", INT32_MAX, vocab);
  if (seen_count > vocab)
    fail(where, "seen_tokens", "expected at most vocab = {}, found {}", vocab, seen_count);
  if (uint64_t{layers} * vocab + 1 > limits.max_prior_rows)
    fail(where, "vocab", "expected layers * vocab <= {} prior rows, found {} * {}",
         limits.max_prior_rows, layers, vocab);
  if (steps > UINT64_MAX / top_k)
    fail(where, "steps", "expected steps * top_k to fit in 64 bits, found {}", steps);

  policy::Calibration c;
  c.layers = static_cast<int>(layers);
  c.experts = static_cast<int>(experts);
  c.top_k = static_cast<int>(top_k);
  c.steps = steps;
  in.need(uint64_t{experts} * 12 + 4, layers, "layers");
  c.expert_counts.assign(layers, std::vector<uint64_t>(experts));
  c.expert_order.assign(layers, std::vector<int32_t>(experts));
  c.score_range.assign(layers, 0.0f);
  std::vector<uint8_t> placed(experts);
  for (uint32_t l = 0; l < layers; ++l) {
    const std::string layer = fmt::format("layer {}", l);
    auto& counts = c.expert_counts[l];
    auto& order = c.expert_order[l];
    uint64_t total = 0;
    bool overflow = false;
    for (auto& count : counts) {
      count = in.get<uint64_t>(layer + " expert_counts");
      overflow = overflow || count > UINT64_MAX - total;
      total += count;
    }
    if (overflow || total != steps * top_k)
      fail(where, layer + " expert_counts",
           "expected counts summing to steps * top_k = {}, found another sum", steps * top_k);
    std::fill(placed.begin(), placed.end(), uint8_t{0});
    for (uint32_t i = 0; i < experts; ++i) {
      const auto e = in.get<int32_t>(layer + " expert_order");
      if (e < 0 || static_cast<uint32_t>(e) >= experts || placed[static_cast<size_t>(e)])
        fail(where, layer + " expert_order",
             "expected a permutation of 0..{}, found {} at position {}", experts - 1, e, i);
      placed[static_cast<size_t>(e)] = 1;
      order[i] = e;
      if (i > 0) {
        const int32_t prev = order[i - 1];
        const uint64_t a = counts[static_cast<size_t>(prev)], b = counts[static_cast<size_t>(e)];
        if (a < b || (a == b && prev > e))
          fail(where, layer + " expert_order",
               "expected experts by count, highest first, ties to the lower index; expert {} "
               "(count {}) is after "
               "expert {} (count {})",
               e, b, prev, a);
      }
    }
    const auto range = in.get<float>(layer + " score_range");
    if (!std::isfinite(range) || range < 0.0f)
      fail(where, layer + " score_range", "expected a finite non-negative number, found {}", range);
    c.score_range[l] = range;
  }

  // Token prior: seen tokens, row lengths, entries.
  policy::TokenPrior& prior = c.prior;
  prior.layers = c.layers;
  prior.vocab = static_cast<int>(vocab);
  prior.occurrences.assign(vocab, 0);
  in.need(8, seen_count, "seen_tokens");
  std::vector<uint32_t> seen(seen_count);
  uint64_t occurrence_sum = 0;
  for (uint32_t i = 0; i < seen_count; ++i) {
    const auto x = in.get<uint32_t>("seen_tokens token");
    const auto occ = in.get<uint32_t>("seen_tokens occurrences");
    if (x >= vocab || (i > 0 && x <= seen[i - 1]))
      fail(where, "seen_tokens",
           "expected strictly increasing token ids below vocab = {}, found {} at entry {}", vocab,
           x, i);
    if (occ == 0)
      fail(where, "seen_tokens", "expected a positive occurrence count for token {}", x);
    seen[i] = x;
    prior.occurrences[x] = occ;
    occurrence_sum += occ;
  }
  if (occurrence_sum > steps)
    fail(where, "seen_tokens", "expected at most steps = {} occurrences in all, found {}", steps,
         occurrence_sum);
  in.need(4, uint64_t{layers} * seen_count, "row_lengths");
  std::vector<uint32_t> lengths(uint64_t{layers} * seen_count);
  uint64_t entry_total = 0;
  for (size_t i = 0; i < lengths.size(); ++i) {
    lengths[i] = in.get<uint32_t>("row_lengths");
    if (lengths[i] > experts)
      fail(where, "row_lengths",
           "expected at most experts = {} entries per row, found {} (layer {}, token {})", experts,
           lengths[i], i / seen_count, seen[i % seen_count]);
    entry_total += lengths[i];
  }
  if (in.left() != entry_total * kEntryBytes)
    fail(where, "entries", "expected {} entries = {} bytes to end the file, found {} bytes",
         entry_total, entry_total * kEntryBytes, in.left());
  prior.entries.resize(entry_total);
  prior.row_begin.assign(uint64_t{layers} * vocab + 1, 0);
  uint64_t next = 0;
  for (uint32_t l = 0; l < layers; ++l) {
    size_t seen_index = 0;
    for (uint32_t x = 0; x < vocab; ++x) {
      const uint64_t row = uint64_t{l} * vocab + x;
      prior.row_begin[row] = next;
      if (seen_index < seen.size() && seen[seen_index] == x) {
        const uint32_t length = lengths[uint64_t{l} * seen_count + seen_index];
        uint64_t row_sum = 0;
        for (uint32_t j = 0; j < length; ++j) {
          policy::PriorEntry& entry = prior.entries[next + j];
          entry.expert = in.get<uint16_t>("entries expert");
          entry.count = in.get<uint32_t>("entries count");
          const std::string field = fmt::format("entries (layer {}, token {})", l, x);
          if (entry.expert >= experts ||
              (j > 0 && entry.expert <= prior.entries[next + j - 1].expert))
            fail(where, field, "expected strictly increasing expert ids below {}, found {}",
                 experts, entry.expert);
          if (entry.count == 0 || entry.count > prior.occurrences[x])
            fail(where, field, "expected a count in [1, occurrences = {}], found {} for expert {}",
                 prior.occurrences[x], entry.count, entry.expert);
          row_sum += entry.count;
        }
        if (length > 0 && row_sum != uint64_t{prior.occurrences[x]} * top_k)
          fail(where, fmt::format("entries (layer {}, token {})", l, x),
               "expected counts summing to occurrences * top_k = {}, found {}",
               uint64_t{prior.occurrences[x]} * top_k, row_sum);
        next += length;
        ++seen_index;
      }
    }
  }
  prior.row_begin.back() = next;
  SM_ASSERT(next == entry_total && in.left() == 0);
  c.check(where.c_str());
  return c;
}

void write_calibration(const std::filesystem::path& path, const policy::Calibration& calibration) {
  const std::vector<uint8_t> bytes = encode_calibration(calibration);
  // Temporary name + rename: an interrupted or failed write leaves no truncated .smcal.
  write_file_atomic(path,
                    std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
}

policy::Calibration read_calibration(const std::filesystem::path& path) {
  const MappedFile file = MappedFile::open(path, "a trace or calibration file");
  const std::span<const std::byte> bytes = file.bytes();
  return decode_calibration({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()},
                            path.string());
}

std::string calibration_fingerprint(const policy::Calibration& calibration) {
  uint64_t h = 14695981039346656037ull;  // FNV-1a, 64 bits
  for (const uint8_t b : encode_calibration(calibration)) {
    h ^= b;
    h *= 1099511628211ull;
  }
  return fmt::format("fnv1a64:{:016x}", h);
}

}  // namespace steermoe::trace
