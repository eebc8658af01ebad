#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "policy/router.hpp"

namespace steermoe::policy {
namespace {

std::vector<int32_t> topk_of(const std::vector<float>& s, const std::vector<float>& tie, int k) {
  std::vector<int32_t> out(k);
  top_k(s, tie, k, out);
  return out;
}

TEST(TopK, RanksByScoreThenUnbonusedThenIndex) {
  // Equal selection scores: the higher unbonused score wins, then the lower index.
  std::vector<float> selection = {1.5f, 1.5f, 1.5f, 0.0f, 2.0f};
  std::vector<float> unbonused = {0.5f, 1.5f, 0.5f, 0.0f, 2.0f};
  EXPECT_EQ(topk_of(selection, unbonused, 3), (std::vector<int32_t>{4, 1, 0}));
  EXPECT_EQ(topk_of(selection, selection, 4), (std::vector<int32_t>{4, 0, 1, 2}));
}

TEST(TopK, MatchesFullSortOnRandomInputsWithTies) {
  uint32_t state = 12345;
  auto next = [&] {
    state = state * 1664525u + 1013904223u;
    return state >> 8;
  };
  for (int trial = 0; trial < 200; ++trial) {
    const int n = 1 + static_cast<int>(next() % 70);
    const int k = 1 + static_cast<int>(next() % n);
    std::vector<float> s(n), t(n);
    for (int i = 0; i < n; ++i) {
      s[i] = static_cast<float>(next() % 5);  // many ties
      t[i] = static_cast<float>(next() % 3);
    }
    std::vector<int32_t> all(n);
    for (int i = 0; i < n; ++i) all[i] = i;
    std::stable_sort(all.begin(), all.end(), [&](int a, int b) {
      if (s[a] != s[b]) return s[a] > s[b];
      return t[a] > t[b];
    });
    all.resize(k);
    EXPECT_EQ(topk_of(s, t, k), all);
  }
}

TEST(TopK, EveryVectorPathMatchesTheScalarReference) {
  std::mt19937 rng(77);
  for (int trial = 0; trial < 3000; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 300);
    const int k = 1 + static_cast<int>(rng() % std::min(n, 32));
    std::vector<float> s(n), t(n);
    const bool heavy_ties = trial % 3 == 0;
    for (int i = 0; i < n; ++i) {
      s[i] = heavy_ties ? static_cast<float>(rng() % 4)
                        : std::ldexp(static_cast<float>(rng() % 100000), -10);
      t[i] = static_cast<float>(rng() % 3);
    }
    if (trial % 50 == 1) s[rng() % n] = INFINITY;  // non-finite input takes the reference path
    if (trial % 50 == 2) s[rng() % n] = -INFINITY;
    std::vector<int32_t> ref(k), got(k);
    top_k_reference(s, t, k, ref);
    for (TopKPath path : {TopKPath::kAuto, TopKPath::kSse2, TopKPath::kAvx2, TopKPath::kAvx512}) {
      top_k(s, t, k, got, path);
      ASSERT_EQ(got, ref) << "n=" << n << " k=" << k << " path=" << static_cast<int>(path);
    }
  }
}

TEST(ModelTopK, GroupLimitedSelectionKeepsBestGroups) {
  // 8 experts in 4 groups of 2, keep 2 groups, top-2.
  RouterSpec spec{.experts = 8,
                  .top_k = 2,
                  .layers = 1,
                  .mode = ScoreMode::kSigmoid,
                  .n_group = 4,
                  .topk_group = 2};
  // Group sums: g0 = 0.9+0.1 = 1.0, g1 = 0.5+0.5 = 1.0, g2 = 0.95+0.0 = 0.95, g3 = 0.2+0.2.
  // Kept: g0 and g1 (tie on 1.0 between g0 and g1, both kept); expert 4 (0.95, g2) is masked.
  std::vector<float> z = {0.9f, 0.1f, 0.5f, 0.5f, 0.95f, 0.0f, 0.2f, 0.2f};
  std::vector<int32_t> out(2);
  std::vector<float> gs(4), masked(8);
  std::vector<uint8_t> kept(4);
  model_top_k(spec, z, z, out, gs, kept, masked);
  EXPECT_EQ(out, (std::vector<int32_t>{0, 2}));
  // Without the limit expert 4 would win.
  spec.topk_group = 4;
  model_top_k(spec, z, z, out, gs, kept, masked);
  EXPECT_EQ(out, (std::vector<int32_t>{4, 0}));
}

TEST(ExecutionWeights, FollowEachModelsRule) {
  std::vector<float> logits = {1.0f, 2.0f, 0.5f, -1.0f};
  std::vector<int32_t> sel = {0, 1};
  std::vector<float> w(2);
  RouterSpec olmoe{.experts = 4, .top_k = 2, .layers = 1};
  execution_weights(olmoe, logits, sel, w);
  double denom = std::exp(1.0) + std::exp(2.0) + std::exp(0.5) + std::exp(-1.0);
  EXPECT_NEAR(w[0], std::exp(1.0) / denom, 1e-6);
  EXPECT_NEAR(w[1], std::exp(2.0) / denom, 1e-6);

  RouterSpec qwen = olmoe;
  qwen.norm_topk_prob = true;
  execution_weights(qwen, logits, sel, w);
  EXPECT_NEAR(w[0] + w[1], 1.0, 1e-6);
  EXPECT_NEAR(w[1] / w[0], std::exp(1.0), 1e-5);

  RouterSpec ds{.experts = 4,
                .top_k = 2,
                .layers = 1,
                .mode = ScoreMode::kSigmoid,
                .norm_topk_prob = true,
                .routed_scaling_factor = 2.5f};
  std::vector<float> sig = {0.2f, 0.6f, 0.1f, 0.3f};
  execution_weights(ds, sig, sel, w);
  EXPECT_NEAR(w[0], 0.2 / 0.8 * 2.5, 1e-6);
  EXPECT_NEAR(w[1], 0.6 / 0.8 * 2.5, 1e-6);
}

}  // namespace
}  // namespace steermoe::policy
