// `calibrate` on a hand-made trace (hand-computed warm order, ranges, prior) and the .smcal
// format: round trip, size, and rejection of malformed files.
#include <cstring>

#include "../json_test_util.hpp"
#include "common/error.hpp"
#include "test_util.hpp"
#include "trace/calibrate.hpp"
#include "trace/calibration_file.hpp"
#include "trace/trace.hpp"

namespace steermoe::trace {
namespace {

using testing::ScratchDir;

// L = 2, E = 4, K = 2, tokens [0, 1, 0]. Exact top-2 per step (ties: lower index):
//   t0 (token 0): l0 [4,3,1,0] -> {0,1}, range 4;  l1 [0,1,2,3] -> {2,3}, range 3
//   t1 (token 1): l0 [1,5,0,2] -> {1,3}, range 5;  l1 [2,2,0,1] -> {0,1} (tie 0/1), range 2
//   t2 (token 0): l0 [5,4,0,0] -> {0,1}, range 5;  l1 [3,0,0,0] -> {0,1} (tie -> 1), range 3
// Counts l0: e0 2, e1 3, e2 0, e3 1 -> warm order [1, 0, 3, 2]; range (4+5+5)/3.
// Counts l1: e0 2, e1 2, e2 1, e3 1 -> warm order [0, 1, 2, 3]; range (3+2+3)/3.
// Prior: occurrences token0 2, token1 1, token2 0 (vocab 3);
//   l0 token0 {e0: 2, e1: 2}, l0 token1 {e1: 1, e3: 1};
//   l1 token0 {e0: 1, e1: 1, e2: 1, e3: 1}, l1 token1 {e0: 1, e1: 1}.
void write_hand_trace(const std::filesystem::path& dir) {
  TraceMeta meta;
  meta.layers = 2;
  meta.experts = 4;
  meta.top_k = 2;
  meta.vocab = 3;
  TraceWriter writer(dir, meta, false);
  const std::vector<std::vector<float>> steps = {
      {4, 3, 1, 0, 0, 1, 2, 3}, {1, 5, 0, 2, 2, 2, 0, 1}, {5, 4, 0, 0, 3, 0, 0, 0}};
  const int32_t tokens[] = {0, 1, 0};
  const std::vector<float> pregate(8, 0.0f);
  for (size_t t = 0; t < steps.size(); ++t) writer.append_step(tokens[t], steps[t], pregate);
  writer.close();
}

std::vector<std::pair<int, int>> row_of(const policy::Calibration& c, int layer, int token) {
  std::vector<std::pair<int, int>> out;
  for (const policy::PriorEntry& e : c.prior.row(layer, token))
    out.emplace_back(e.expert, static_cast<int>(e.count));
  return out;
}

// A trace of no steps has nothing to calibrate on: an error naming the folder, not a calibration
// that makes every policy route like exact routing.
TEST(Calibrate, ATraceWithoutStepsIsRefused) {
  ScratchDir dir;
  TraceMeta meta;
  meta.layers = 2;
  meta.experts = 4;
  meta.top_k = 2;
  meta.vocab = 3;
  TraceWriter writer(dir.path(), meta, false);
  writer.close();
  try {
    calibrate_trace(Trace::open(dir.path()));
    ADD_FAILURE() << "calibrated an empty trace";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(dir.path().string() + ": steps"), std::string::npos)
        << e.what();
  }
}

TEST(Calibrate, HandComputedWarmOrderRangesAndPrior) {
  ScratchDir dir;
  write_hand_trace(dir.path());
  const policy::Calibration c = calibrate_trace(Trace::open(dir.path()));
  EXPECT_EQ(c.steps, 3u);
  EXPECT_EQ(c.expert_counts[0], (std::vector<uint64_t>{2, 3, 0, 1}));
  EXPECT_EQ(c.expert_counts[1], (std::vector<uint64_t>{2, 2, 1, 1}));
  EXPECT_EQ(c.expert_order[0], (std::vector<int32_t>{1, 0, 3, 2}));
  EXPECT_EQ(c.expert_order[1], (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_FLOAT_EQ(c.score_range[0], 14.0f / 3.0f);
  EXPECT_FLOAT_EQ(c.score_range[1], 8.0f / 3.0f);
  EXPECT_EQ(c.prior.vocab, 3);
  EXPECT_EQ(c.prior.occurrences, (std::vector<uint32_t>{2, 1, 0}));
  using Row = std::vector<std::pair<int, int>>;
  EXPECT_EQ(row_of(c, 0, 0), (Row{{0, 2}, {1, 2}}));
  EXPECT_EQ(row_of(c, 0, 1), (Row{{1, 1}, {3, 1}}));
  EXPECT_EQ(row_of(c, 0, 2), Row{});
  EXPECT_EQ(row_of(c, 1, 0), (Row{{0, 1}, {1, 1}, {2, 1}, {3, 1}}));
  EXPECT_EQ(row_of(c, 1, 1), (Row{{0, 1}, {1, 1}}));

  const nlohmann::json report = calibration_report(c, 2);
  // Warm set of 2 covers (3 + 2) / 6 picks at layer 0 and (2 + 2) / 6 at layer 1.
  EXPECT_DOUBLE_EQ(report["warm_coverage"][0].get<double>(), 5.0 / 6.0);
  EXPECT_DOUBLE_EQ(report["warm_coverage"][1].get<double>(), 4.0 / 6.0);
  EXPECT_EQ(report["prior_entries"], 10);
}

TEST(CalibrationFile, RoundTripsExactly) {
  ScratchDir dir;
  write_hand_trace(dir.path());
  const policy::Calibration c = calibrate_trace(Trace::open(dir.path()));
  write_calibration(dir / "c.smcal", c);
  const policy::Calibration back = read_calibration(dir / "c.smcal");
  EXPECT_EQ(back.layers, c.layers);
  EXPECT_EQ(back.experts, c.experts);
  EXPECT_EQ(back.top_k, c.top_k);
  EXPECT_EQ(back.steps, c.steps);
  EXPECT_EQ(back.expert_counts, c.expert_counts);
  EXPECT_EQ(back.expert_order, c.expert_order);
  EXPECT_EQ(std::memcmp(back.score_range.data(), c.score_range.data(),
                        c.score_range.size() * sizeof(float)),
            0);
  EXPECT_EQ(back.prior.vocab, c.prior.vocab);
  EXPECT_EQ(back.prior.occurrences, c.prior.occurrences);
  EXPECT_EQ(back.prior.row_begin, c.prior.row_begin);
  ASSERT_EQ(back.prior.entries.size(), c.prior.entries.size());
  for (size_t i = 0; i < c.prior.entries.size(); ++i) {
    EXPECT_EQ(back.prior.entries[i].expert, c.prior.entries[i].expert);
    EXPECT_EQ(back.prior.entries[i].count, c.prior.entries[i].count);
  }
  // Re-encoding gives the same bytes.
  EXPECT_EQ(encode_calibration(back), encode_calibration(c));
}

TEST(CalibrationFile, UninformedCalibrationRoundTrips) {
  policy::RouterSpec spec;
  spec.layers = 3;
  spec.experts = 8;
  spec.top_k = 2;
  const policy::Calibration c = policy::uninformed_calibration(spec);
  const policy::Calibration back = decode_calibration(encode_calibration(c), "u.smcal");
  EXPECT_EQ(back.expert_order, c.expert_order);
  EXPECT_TRUE(back.prior.empty());
}

TEST(CalibrationFile, StaysSmallForBigVocabularies) {
  ScratchDir dir;
  write_hand_trace(dir.path());
  // Same 3 steps, prior table sized for a 248k vocabulary: only seen tokens cost bytes.
  const policy::Calibration c = calibrate_trace(Trace::open(dir.path()), 248320);
  const std::vector<uint8_t> bytes = encode_calibration(c);
  EXPECT_LT(bytes.size(), 400u);
  const policy::Calibration back = decode_calibration(bytes, "big.smcal");
  EXPECT_EQ(back.prior.vocab, 248320);
  EXPECT_EQ(back.prior.row(1, 1).size(), 2u);
}

class MalformedCalibration : public ::testing::Test {
 protected:
  void SetUp() override {
    write_hand_trace(dir_.path());
    good_ = encode_calibration(calibrate_trace(Trace::open(dir_.path())));
  }
  std::string error_with(size_t offset, const std::vector<uint8_t>& patch) {
    std::vector<uint8_t> bytes = good_;
    std::copy(patch.begin(), patch.end(), bytes.begin() + static_cast<std::ptrdiff_t>(offset));
    return testing::error_of([&] { decode_calibration(bytes, "bad.smcal"); });
  }
  ScratchDir dir_;
  std::vector<uint8_t> good_;
};

// Layout offsets for L = 2, E = 4: header 40 bytes; per layer 4*8 counts + 4*4 order + 4 range
// = 52.
constexpr size_t kLayer0 = 40, kLayer1 = 92, kSeen = 144;

TEST_F(MalformedCalibration, EveryTruncationIsRejected) {
  for (size_t n = 0; n < good_.size(); ++n) {
    const std::vector<uint8_t> prefix(good_.begin(),
                                      good_.begin() + static_cast<std::ptrdiff_t>(n));
    const std::string message = testing::error_of([&] { decode_calibration(prefix, "cut.smcal"); });
    EXPECT_THAT(message, ::testing::HasSubstr("cut.smcal")) << n;
  }
  std::vector<uint8_t> longer = good_;
  longer.push_back(0);
  EXPECT_THAT(
      testing::error_of([&] { decode_calibration(longer, "long.smcal"); }),
      ::testing::AllOf(::testing::HasSubstr("entries"), ::testing::HasSubstr("to end the file")));
}

TEST_F(MalformedCalibration, HeaderFields) {
  EXPECT_THAT(error_with(0, {'X'}), ::testing::HasSubstr("bad.smcal: magic"));
  EXPECT_THAT(error_with(8, {2}), ::testing::HasSubstr("version: expected 1, found 2"));
  EXPECT_THAT(error_with(12, {0}), ::testing::HasSubstr("layers: expected 1..4096, found 0"));
  EXPECT_THAT(error_with(20, {5}), ::testing::HasSubstr("top_k: expected 1..experts = 4, found 5"));
  EXPECT_THAT(error_with(28, {9}),
              ::testing::HasSubstr("seen_tokens: expected at most vocab = 3, found 9"));
  // A huge declared vocabulary is refused before anything is allocated.
  EXPECT_THAT(error_with(24, {0xff, 0xff, 0xff, 0x7f}),
              ::testing::HasSubstr("vocab: expected layers * vocab"));
}

TEST_F(MalformedCalibration, LayerTables) {
  // Expert count of e2 at layer 0 bumped: counts no longer sum to steps * K.
  EXPECT_THAT(error_with(kLayer0 + 16, {1}),
              ::testing::HasSubstr("layer 0 expert_counts: expected counts summing"));
  // Order [1, 0, 3, 2] -> [1, 1, 3, 2]: not a permutation.
  EXPECT_THAT(error_with(kLayer0 + 32 + 4, {1}),
              ::testing::HasSubstr("layer 0 expert_order: expected a permutation"));
  // Order [1, 0, 3, 2] -> [0, 1, 3, 2]: a permutation, but not by count.
  EXPECT_THAT(error_with(kLayer0 + 32, {0, 0, 0, 0, 1}), ::testing::HasSubstr("highest first"));
  // Expert id out of range.
  EXPECT_THAT(error_with(kLayer1 + 32, {9}), ::testing::HasSubstr("layer 1 expert_order"));
  // Score range NaN (0x7fc00000) and negative.
  EXPECT_THAT(error_with(kLayer1 + 48, {0, 0, 0xc0, 0x7f}),
              ::testing::HasSubstr("layer 1 score_range"));
  EXPECT_THAT(error_with(kLayer0 + 48 + 3, {static_cast<uint8_t>(0x80 | good_[kLayer0 + 51])}),
              ::testing::HasSubstr("layer 0 score_range: expected a finite non-negative number"));
}

TEST_F(MalformedCalibration, PriorFields) {
  // Seen tokens: (0, 2), (1, 1). Token ids must increase and stay below vocab.
  EXPECT_THAT(error_with(kSeen + 8, {0}),
              ::testing::HasSubstr("seen_tokens: expected strictly increasing"));
  EXPECT_THAT(error_with(kSeen + 8, {3}), ::testing::HasSubstr("below vocab = 3"));
  EXPECT_THAT(error_with(kSeen + 12, {0}), ::testing::HasSubstr("positive occurrence count"));
  // Row lengths (L x seen = 4 u32) follow; a row longer than E.
  const size_t lengths = kSeen + 16;
  EXPECT_THAT(error_with(lengths, {5}),
              ::testing::HasSubstr("row_lengths: expected at most experts = 4"));
  // Entries: first row (layer 0, token 0) = (e0, 2), (e1, 2).
  const size_t entries = lengths + 16;
  EXPECT_THAT(error_with(entries, {7}),
              ::testing::HasSubstr("entries (layer 0, token 0): expected strictly increasing"));
  EXPECT_THAT(error_with(entries + 2, {3}),
              ::testing::HasSubstr("count in [1, occurrences = 2], found 3"));
  EXPECT_THAT(error_with(entries + 6, {0}), ::testing::HasSubstr("strictly increasing expert ids"));
  EXPECT_THAT(error_with(entries + 2, {1}),
              ::testing::HasSubstr("summing to occurrences * top_k = 4"));
}

TEST(CalibrationFile, MissingFileIsNamed) {
  EXPECT_ERROR_MENTIONS(read_calibration("/nonexistent/c.smcal"), "/nonexistent/c.smcal");
}

}  // namespace
}  // namespace steermoe::trace
