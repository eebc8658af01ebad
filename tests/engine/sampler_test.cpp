#include "engine/sampler.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <vector>

#include "common/error.hpp"

namespace steermoe::engine {
namespace {

TEST(Sampler, GreedyIsArgmaxWithTiesToLowerId) {
  Sampler s(5, {});
  const std::vector<float> logits{0.1f, 3.0f, -1.0f, 3.0f, 2.0f};
  EXPECT_EQ(s.sample(logits), 1);
  EXPECT_EQ(argmax(logits), 1);
}

TEST(Sampler, SeededSamplingIsReproducibleAndSeedDependent) {
  std::vector<float> logits(50);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>(i % 7) * 0.3f;
  auto draw = [&](uint64_t seed) {
    Sampler s(50, {.temperature = 1.0f, .top_p = 0.95f, .seed = seed});
    std::vector<int32_t> out;
    for (int i = 0; i < 64; ++i) out.push_back(s.sample(logits));
    return out;
  };
  EXPECT_EQ(draw(7), draw(7));
  EXPECT_NE(draw(7), draw(8));
}

TEST(Sampler, TinyTopPKeepsOnlyTheBestToken) {
  std::vector<float> logits{0.0f, 1.0f, 5.0f, 2.0f};
  Sampler s(4, {.temperature = 2.0f, .top_p = 1e-6f, .seed = 3});
  for (int i = 0; i < 20; ++i) EXPECT_EQ(s.sample(logits), 2);
}

TEST(Sampler, SamplesFollowTheDistribution) {
  std::vector<float> logits{0.0f, std::log(3.0f)};  // p = 0.25, 0.75
  Sampler s(2, {.temperature = 1.0f, .top_p = 1.0f, .seed = 11});
  int ones = 0;
  for (int i = 0; i < 4000; ++i) ones += s.sample(logits);
  EXPECT_NEAR(ones / 4000.0, 0.75, 0.03);
}

TEST(Sampler, RejectsBadParameters) {
  EXPECT_THROW(Sampler(4, {.temperature = -1.0f}), Error);
  EXPECT_THROW(Sampler(4, {.temperature = 1.0f, .top_p = 0.0f}), Error);
  EXPECT_THROW(Sampler(4, {.top_k = -1}), Error);
  EXPECT_THROW(Sampler(4, {.min_p = 1.5f}), Error);
  EXPECT_THROW(Sampler(4, {.repetition_penalty = 0.0f}), Error);
  EXPECT_THROW(Sampler(4, {.penalty_last_n = -2}), Error);
}

// --- the sampler against a scalar reference ----------------------------------------------------

// The sampler's rules written the plainest way, in double precision: penalties over the last
// penalty_last_n tokens of `history`, then greedy, or softmax at the temperature, sort (ties to
// the lower id), top-k, top-p of the top-k mass, min-p of the top probability, renormalize.
std::vector<std::pair<int32_t, double>> reference(const std::vector<float>& logits,
                                                  std::vector<int32_t> history,
                                                  const SamplerParams& p) {
  std::vector<double> l(logits.begin(), logits.end());
  if (p.penalty_last_n == 0) history.clear();
  if (p.penalty_last_n > 0 && history.size() > static_cast<size_t>(p.penalty_last_n)) {
    history.erase(history.begin(), history.end() - p.penalty_last_n);
  }
  std::map<int32_t, int> count;
  for (int32_t t : history) count[t]++;
  for (const auto& [t, c] : count) {
    double& x = l[static_cast<size_t>(t)];
    x = x > 0 ? x / p.repetition_penalty : x * p.repetition_penalty;
    x -= c * static_cast<double>(p.frequency_penalty) + p.presence_penalty;
  }
  std::vector<int32_t> ids(l.size());
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);
  if (p.temperature == 0) {
    int32_t best = 0;
    for (int32_t i : ids)
      best = l[static_cast<size_t>(i)] > l[static_cast<size_t>(best)] ? i : best;
    return {{best, 1.0}};
  }
  const double mx = *std::max_element(l.begin(), l.end());
  std::vector<double> prob(l.size());
  for (size_t i = 0; i < l.size(); ++i) prob[i] = std::exp((l[i] - mx) / p.temperature);
  std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
    return prob[static_cast<size_t>(a)] > prob[static_cast<size_t>(b)];
  });
  if (p.top_k > 0 && ids.size() > static_cast<size_t>(p.top_k))
    ids.resize(static_cast<size_t>(p.top_k));
  double mass = 0;
  for (int32_t i : ids) mass += prob[static_cast<size_t>(i)];
  std::vector<std::pair<int32_t, double>> kept;
  double cum = 0;
  for (int32_t i : ids) {
    const double q = prob[static_cast<size_t>(i)];
    if (!kept.empty() && q < p.min_p * prob[static_cast<size_t>(ids[0])]) break;
    kept.emplace_back(i, q);
    cum += q;
    if (cum >= p.top_p * mass) break;
  }
  for (auto& [i, q] : kept) q /= cum;
  return kept;
}

std::vector<float> random_logits(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> l(n);
  for (float& x : l) x = normal(rng);
  return l;
}

TEST(Sampler, DistributionMatchesTheScalarReference) {
  std::mt19937 rng(5);
  const std::vector<SamplerParams> configs = {
      {.temperature = 0.8f,
       .top_k = 40,
       .top_p = 0.95f,
       .min_p = 0.05f,
       .repetition_penalty = 1.1f,
       .penalty_last_n = 64},
      {.temperature = 1.0f, .top_k = 5},
      {.temperature = 1.3f, .min_p = 0.2f},
      {.temperature = 0.7f, .top_p = 0.5f},
      {.temperature = 1.0f,
       .presence_penalty = 1.5f,
       .frequency_penalty = 0.7f,
       .penalty_last_n = -1},
      {.temperature = 1.0f,
       .repetition_penalty = 0.6f,
       .frequency_penalty = -0.5f,
       .penalty_last_n = 8},
      {.temperature = 0.0f, .repetition_penalty = 3.0f, .presence_penalty = 2.0f},
      {.temperature = 2.0f, .top_k = 1},
      // Nothing cut: every penalized token, positive logit or negative, shows in the result.
      {.temperature = 1.0f, .repetition_penalty = 1.5f, .penalty_last_n = -1},
  };
  for (size_t c = 0; c < configs.size(); ++c) {
    for (int trial = 0; trial < 5; ++trial) {
      const std::vector<float> logits = random_logits(200, rng);
      std::vector<int32_t> history;
      // Repeats of likely tokens, so the penalties change what is kept.
      for (int i = 0; i < 40; ++i) history.push_back(static_cast<int32_t>(rng() % 12));
      for (int i = 0; i < 30; ++i) history.push_back(argmax(logits));
      Sampler s(200, configs[c]);
      for (int32_t t : history) s.accept(t);
      const auto got = s.distribution(logits);
      const auto want = reference(logits, history, configs[c]);
      ASSERT_EQ(got.size(), want.size()) << "config " << c << " trial " << trial;
      for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_EQ(got[i].first, want[i].first) << "config " << c << " rank " << i;
        EXPECT_NEAR(got[i].second, want[i].second, 1e-5) << "config " << c << " rank " << i;
      }
    }
  }
}

TEST(Sampler, DrawsFollowTheReferenceDistribution) {
  std::mt19937 rng(9);
  const std::vector<float> logits = random_logits(30, rng);
  const SamplerParams p{.temperature = 0.9f,
                        .top_k = 10,
                        .top_p = 0.9f,
                        .min_p = 0.02f,
                        .repetition_penalty = 1.3f,
                        .penalty_last_n = 4,
                        .seed = 17};
  const std::vector<int32_t> history = {argmax(logits), 3, 3, 7, argmax(logits)};
  Sampler s(30, p);
  for (int32_t t : history) s.accept(t);
  std::map<int32_t, int> seen;
  constexpr int kDraws = 20000;
  for (int i = 0; i < kDraws; ++i) seen[s.sample(logits)]++;
  const auto want = reference(logits, history, p);
  int in_set = 0;
  for (const auto& [id, q] : want) {
    EXPECT_NEAR(seen[id] / static_cast<double>(kDraws), q, 0.015) << "token " << id;
    in_set += seen[id];
  }
  EXPECT_EQ(in_set, kDraws) << "a token outside the kept set was drawn";
}

TEST(Sampler, PenaltyWindowForgetsOldTokens) {
  std::vector<float> logits(10, 0.0f);
  logits[4] = 2.0f;
  Sampler s(10, {.temperature = 0.0f,
                 .repetition_penalty = 1.0f,
                 .presence_penalty = 5.0f,
                 .penalty_last_n = 3});
  s.accept(4);
  EXPECT_NE(s.sample(logits), 4) << "token 4 is in the window: 2 - 5 < 0";
  for (int32_t t : {1, 2, 3}) s.accept(t);
  EXPECT_EQ(s.sample(logits), 4) << "token 4 left the window of 3";
  // Greedy without penalties is the plain argmax, whatever was accepted.
  Sampler plain(10, {});
  plain.accept(4);
  EXPECT_EQ(plain.sample(logits), 4);
}

}  // namespace
}  // namespace steermoe::engine
