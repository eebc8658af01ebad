// Sweep grids: ranges, lists, products, decimals, and clear errors.
#include "eval/grid.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/error.hpp"

namespace steermoe::eval {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(Grid, RangeTimesListFirstKeySlowest) {
  EXPECT_THAT(expand_grid("psr:lambda=0.1..0.3:0.1,n=1|2"),
              ElementsAre("psr:lambda=0.1,n=1", "psr:lambda=0.1,n=2", "psr:lambda=0.2,n=1",
                          "psr:lambda=0.2,n=2", "psr:lambda=0.3,n=1", "psr:lambda=0.3,n=2"));
}

TEST(Grid, RangeIncludesItsEndDespiteRounding) {
  const auto g = expand_grid("psr:lambda=0.1..0.5:0.1,n=1|2");
  ASSERT_EQ(g.size(), 10u);
  EXPECT_EQ(g.back(), "psr:lambda=0.5,n=2");
  EXPECT_THAT(expand_grid("cacheprior:lambda=0.15..0.3:0.05"),
              ElementsAre("cacheprior:lambda=0.15", "cacheprior:lambda=0.2",
                          "cacheprior:lambda=0.25", "cacheprior:lambda=0.3"));
  EXPECT_THAT(expand_grid("psr:lambda=0.3,n=1..8:3"),
              ElementsAre("psr:lambda=0.3,n=1", "psr:lambda=0.3,n=4", "psr:lambda=0.3,n=7"));
}

TEST(Grid, SeveralGridsAndPlainPolicies) {
  EXPECT_THAT(expand_grid("exact:evict=lru|a;spec;psr:lambda=0.2"),
              ElementsAre("exact:evict=lru", "exact:evict=a", "spec", "psr:lambda=0.2"));
}

TEST(Grid, ErrorsNameThePart) {
  const auto message = [](const char* grid) {
    try {
      expand_grid(grid);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_THAT(message("psr:lambda=0.5..0.1:0.1"), HasSubstr("from <= to"));
  EXPECT_THAT(message("psr:lambda=0.1..0.5:0"), HasSubstr("positive step"));
  EXPECT_THAT(message("psr:lambda=0.1..0.5"), HasSubstr("from..to:step"));
  EXPECT_THAT(message("psr:lambda=a..0.5:0.1"), HasSubstr("expected a number"));
  EXPECT_THAT(message("psr:lambda=0.1,lambda=0.2"), HasSubstr("each key once"));
  EXPECT_THAT(message("psr:lambda"), HasSubstr("key=SPEC"));
  EXPECT_THAT(message("psr:lambda=1|"), HasSubstr("no empty value"));
  EXPECT_THAT(message("psr:lambda=0..1:0.00001"), HasSubstr("at most 10000"));
  EXPECT_THAT(message("psr:lambda=0.1;;spec"), HasSubstr("no empty grid"));
  EXPECT_THAT(message("nonesuch:lambda=0.1"), HasSubstr("nonesuch"));  // the policy parser's error
  EXPECT_THAT(message("psr:lambda=0.1,bogus=1|2"), HasSubstr("bogus"));
}

}  // namespace
}  // namespace steermoe::eval
