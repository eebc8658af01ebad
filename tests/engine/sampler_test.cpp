#include "engine/sampler.hpp"

#include <gtest/gtest.h>

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
}

}  // namespace
}  // namespace steermoe::engine
