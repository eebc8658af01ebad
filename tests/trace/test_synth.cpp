// trace-synth: shapes, determinism, and that each knob moves the property it claims to.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "common/error.hpp"
#include "test_util.hpp"
#include "trace/synth.hpp"
#include "trace/trace.hpp"

namespace steermoe::trace {
namespace {

using testing::ScratchDir;

using testing::exact_top_k;

size_t overlap(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  std::vector<int32_t> both;
  std::set_intersection(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(both));
  return both.size();
}

Trace make(const ScratchDir& dir, const std::string& name, SynthParams p) {
  synthesize_trace(p, dir / name);
  return Trace::open(dir / name);
}

TEST(Synth, ShapesMatchTheRealModels) {
  ScratchDir dir;
  SynthParams p;
  p.tokens = 6;
  p.sequences = 2;
  p.vocab = 100;
  const std::tuple<const char*, int, int, int, const char*, int> shapes[] = {
      {"olmoe", 16, 64, 8, "softmax", 8},
      {"moonlight", 26, 64, 6, "sigmoid", 4},
      {"qwen36", 40, 256, 8, "softmax", 4}};
  for (const auto& [shape, layers, experts, k, router, window] : shapes) {
    p.shape = shape;
    const Trace t = make(dir, shape, p);
    EXPECT_EQ(t.layers(), layers);
    EXPECT_EQ(t.experts(), experts);
    EXPECT_EQ(t.meta().top_k, k);
    EXPECT_EQ(t.meta().router, router);
    EXPECT_EQ(t.meta().window, window);
    EXPECT_EQ(t.steps(), 6);
    EXPECT_EQ(t.sequence_starts(), (std::vector<int64_t>{0, 3}));
    EXPECT_EQ(t.has_weights_scores(), std::string(router) == "sigmoid");
    for (float v : t.pregate(0, 0)) EXPECT_EQ(v, 0.0f);  // row 0 unused
  }
  EXPECT_EQ(make(dir, "m", {.shape = "moonlight", .tokens = 2, .sequences = 1})
                .meta()
                .moe_layer_ids.front(),
            1);
  EXPECT_ERROR_MENTIONS(synth_shape_meta("mixtral"), "--shape", "olmoe, moonlight or qwen36");
}

TEST(Synth, SigmoidScoresAreWeightsPlusAFixedBias) {
  ScratchDir dir;
  const Trace t = make(dir, "m", {.shape = "moonlight", .tokens = 5, .sequences = 1, .vocab = 50});
  for (int l = 0; l < t.layers(); l += 5) {
    const float bias0 = t.scores(0, l)[3] - t.weights_scores(0, l)[3];
    for (int64_t s = 0; s < t.steps(); ++s) {
      EXPECT_NEAR(t.scores(s, l)[3] - t.weights_scores(s, l)[3], bias0, 1e-6f);
      for (float w : t.weights_scores(s, l)) EXPECT_TRUE(w > 0.0f && w < 1.0f);
    }
  }
}

TEST(Synth, DeterministicForASeed) {
  ScratchDir dir;
  const SynthParams p{.tokens = 20, .sequences = 2, .vocab = 300, .seed = 5};
  synthesize_trace(p, dir / "a");
  synthesize_trace(p, dir / "b");
  SynthParams other = p;
  other.seed = 6;
  synthesize_trace(other, dir / "c");
  for (const char* file : {"scores.npy", "pregate.npy", "tokens.npy", "sequences.npy", "meta.json"})
    EXPECT_EQ(testing::read_bytes(dir / "a" / file), testing::read_bytes(dir / "b" / file)) << file;
  EXPECT_NE(testing::read_bytes(dir / "a" / "scores.npy"),
            testing::read_bytes(dir / "c" / "scores.npy"));
}

double mean_consecutive_overlap(const Trace& t) {
  double total = 0;
  int n = 0;
  for (int64_t s = 1; s < t.steps(); ++s)
    for (int l = 0; l < t.layers(); ++l, ++n)
      total += static_cast<double>(
          overlap(exact_top_k(t.scores(s - 1, l), 8), exact_top_k(t.scores(s, l), 8)));
  return total / n;
}

TEST(Synth, LocalityIncreasesReuseByTheNextToken) {
  ScratchDir dir;
  const Trace low =
      make(dir, "lo", {.tokens = 64, .sequences = 1, .locality = 0.0, .token_dependence = 0.0});
  const Trace high =
      make(dir, "hi", {.tokens = 64, .sequences = 1, .locality = 0.95, .token_dependence = 0.0});
  EXPECT_GT(mean_consecutive_overlap(high), mean_consecutive_overlap(low) + 1.5);
}

double mean_pregate_overlap(const Trace& t) {
  double total = 0;
  int n = 0;
  for (int64_t s = 0; s < t.steps(); ++s)
    for (int l = 1; l < t.layers(); ++l, ++n)
      total += static_cast<double>(
          overlap(exact_top_k(t.pregate(s, l), 8), exact_top_k(t.scores(s, l), 8)));
  return total / n;
}

TEST(Synth, PredictabilityControlsThePregate) {
  ScratchDir dir;
  EXPECT_DOUBLE_EQ(
      mean_pregate_overlap(make(dir, "one", {.tokens = 16, .sequences = 1, .predictability = 1.0})),
      8.0);
  const double low = mean_pregate_overlap(
      make(dir, "zero", {.tokens = 32, .sequences = 1, .predictability = 0.0}));
  const double mid =
      mean_pregate_overlap(make(dir, "mid", {.tokens = 32, .sequences = 1, .predictability = 0.8}));
  EXPECT_LT(low, 2.0);  // chance level is K * K / E = 1
  EXPECT_GT(mid, low + 2.0);
}

TEST(Synth, TokenDependenceMakesRepeatsOfATokenRouteAlike) {
  ScratchDir dir;
  // Vocab of 2: every token repeats often; no locality so only the token links steps.
  auto repeat_overlap = [&](double z, const char* name) {
    const Trace t = make(dir, name,
                         {.tokens = 64,
                          .sequences = 1,
                          .locality = 0.0,
                          .token_dependence = z,
                          .popularity = 0.0,
                          .vocab = 2});
    double total = 0;
    int n = 0;
    for (int64_t a = 0; a < t.steps(); ++a)
      for (int64_t b = a + 1; b < t.steps(); ++b)
        if (t.token(a) == t.token(b)) {
          total += static_cast<double>(
              overlap(exact_top_k(t.scores(a, 3), 8), exact_top_k(t.scores(b, 3), 8)));
          ++n;
        }
    return total / n;
  };
  EXPECT_GT(repeat_overlap(2.0, "z2"), repeat_overlap(0.0, "z0") + 2.0);
}

TEST(Synth, RejectsBadParameters) {
  ScratchDir dir;
  EXPECT_ERROR_MENTIONS(synthesize_trace({.locality = 1.0}, dir / "x"), "--locality", "[0, 1)");
  EXPECT_ERROR_MENTIONS(synthesize_trace({.predictability = -0.1}, dir / "x"), "--predictability");
  EXPECT_ERROR_MENTIONS(synthesize_trace({.tokens = 3, .sequences = 4}, dir / "x"), "--sequences",
                        "1..tokens = 3");
  EXPECT_ERROR_MENTIONS(synthesize_trace({.vocab = -1}, dir / "x"), "--vocab");
}

}  // namespace
}  // namespace steermoe::trace
