#include "policy/calibration.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/error.hpp"

namespace steermoe::policy {
namespace {

TEST(Calibrator, HandComputedWarmOrderRangesAndPrior) {
  RouterSpec spec{.experts = 4, .top_k = 2, .layers = 1};
  Calibrator c(spec, 8);
  // Step 1, token 5: top-2 {1, 2}, range 3 - 0 = 3.
  c.add(0, 5, std::vector<float>{0, 3, 2, 1});
  c.end_step();
  // Step 2, token 5: top-2 {2, 3}, range 4 - (-1) = 5.
  c.add(0, 5, std::vector<float>{-1, 0, 4, 3});
  c.end_step();
  // Step 3, token 6: top-2 {0, 2} (tie at 1.0 between 0 and 1: lower index 0), range 2.
  c.add(0, 6, std::vector<float>{1, 1, 2, 0});
  c.end_step();
  Calibration cal = c.finish();
  cal.check("hand calibration");
  EXPECT_EQ(cal.steps, 3u);
  EXPECT_EQ(cal.expert_counts[0], (std::vector<uint64_t>{1, 1, 3, 1}));
  EXPECT_EQ(cal.expert_order[0], (std::vector<int32_t>{2, 0, 1, 3}));
  EXPECT_FLOAT_EQ(cal.score_range[0], (3.0f + 5.0f + 2.0f) / 3.0f);
  EXPECT_EQ(cal.prior.occurrences[5], 2u);
  EXPECT_EQ(cal.prior.occurrences[6], 1u);
  auto row5 = cal.prior.row(0, 5);
  ASSERT_EQ(row5.size(), 3u);  // experts 1, 2, 3 with counts 1, 2, 1
  EXPECT_EQ(row5[0].expert, 1);
  EXPECT_EQ(row5[0].count, 1u);
  EXPECT_EQ(row5[1].expert, 2);
  EXPECT_EQ(row5[1].count, 2u);
  EXPECT_EQ(row5[2].expert, 3);
  auto row6 = cal.prior.row(0, 6);
  ASSERT_EQ(row6.size(), 2u);
  EXPECT_EQ(row6[0].expert, 0);
  EXPECT_TRUE(cal.prior.row(0, 7).empty());
  EXPECT_TRUE(cal.prior.row(0, 1000).empty());
}

TEST(Calibration, CheckRejectsInconsistentData) {
  RouterSpec spec{.experts = 4, .top_k = 2, .layers = 1};
  Calibrator c(spec, 4);
  c.add(0, 1, std::vector<float>{0, 3, 2, 1});
  c.end_step();
  Calibration good = c.finish();
  EXPECT_NO_THROW(good.check("x"));

  Calibration bad_order = good;
  std::swap(bad_order.expert_order[0][0], bad_order.expert_order[0][1]);
  EXPECT_THAT([&] { bad_order.check("cal.smcal"); },
              ::testing::ThrowsMessage<Error>(::testing::HasSubstr("layer 0 order")));

  Calibration bad_range = good;
  bad_range.score_range[0] = -1.0f;
  EXPECT_THROW(bad_range.check("x"), Error);

  Calibration bad_prior = good;
  bad_prior.prior.entries[0].expert = 9;
  EXPECT_THAT([&] { bad_prior.check("cal.smcal"); },
              ::testing::ThrowsMessage<Error>(::testing::HasSubstr("token prior entry")));

  Calibration bad_count = good;
  bad_count.prior.entries[0].count = 5;  // more than the token's occurrences
  EXPECT_THROW(bad_count.check("x"), Error);
}

TEST(Calibrator, RejectsTokensOutsideTheVocabulary) {
  RouterSpec spec{.experts = 4, .top_k = 2, .layers = 1};
  Calibrator c(spec, 4);
  EXPECT_THROW(c.add(0, 4, std::vector<float>{0, 1, 2, 3}), Error);
  EXPECT_THROW(c.add(0, -1, std::vector<float>{0, 1, 2, 3}), Error);
}

}  // namespace
}  // namespace steermoe::policy
