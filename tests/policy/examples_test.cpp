// Hand-worked examples of docs/policy-contract.md, one per named policy. Each step lists the
// expected S, emitted copies, evictions and the slot map, derived by hand in the comments.
#include <gtest/gtest.h>

#include <cmath>

#include "common/error.hpp"
#include "policy/router.hpp"
#include "test_util.hpp"

namespace steermoe::policy {
namespace {

using testing_util::copies;
using testing_util::simple_calibration;
using testing_util::slot_map;
using Pairs = std::vector<std::pair<int, int>>;
using Ids = std::vector<int32_t>;

// E = 6, K = 2, C = 3, warm set {0, 1, 2} in slots 0, 1, 2.
RouterSpec tiny(int layers) {
  return RouterSpec{.experts = 6, .top_k = 2, .layers = layers};
}

TEST(Examples, ExactLruDemandLoadsWithLruTiesToLowerIndex) {
  RouterSpec spec = tiny(1);
  Calibration calib = simple_calibration(spec, 1.0f);
  RequestRouter r(spec, parse_policy("exact:evict=lru"), calib, 3);

  // Step 1: top-2 = {3, 4}. All clocks 0: 3 evicts 0 (lowest index) into slot 0, 4 evicts 1.
  r.begin_token(0);
  const Decision& d1 = r.select(0, std::vector<float>{0, 0, 0, 5, 4, 0});
  EXPECT_EQ(d1.selected, (Ids{3, 4}));
  EXPECT_EQ(copies(d1.demand), (Pairs{{3, 0}, {4, 1}}));
  EXPECT_EQ(d1.evicted, (Ids{0, 1}));
  EXPECT_EQ(slot_map(r.cache(0)), (std::vector<int>{3, 4, 2}));

  // Step 2: S = {2, 5}; 2 is resident. Clocks: 2 -> 0, 3 -> 1, 4 -> 1; victims {3, 4} (2 is in
  // S): tie at 1, lower index 3 leaves slot 0.
  r.begin_token(0);
  const Decision& d2 = r.select(0, std::vector<float>{0, 0, 9, 5, 0, 8});
  EXPECT_EQ(d2.selected, (Ids{2, 5}));
  EXPECT_EQ(copies(d2.demand), (Pairs{{5, 0}}));
  EXPECT_EQ(d2.evicted, (Ids{3}));
  EXPECT_EQ(slot_map(r.cache(0)), (std::vector<int>{5, 4, 2}));

  // Step 3: S = {0, 4}. Clocks 2 -> 2 (executed at step 2), 4 -> 1, 5 -> 2; victims {2, 5}
  // (4 is in S): tie at 2, lower index 2 leaves slot 2.
  r.begin_token(0);
  const Decision& d3 = r.select(0, std::vector<float>{9, 0, 0, 0, 8, 0});
  EXPECT_EQ(d3.selected, (Ids{0, 4}));
  EXPECT_EQ(copies(d3.demand), (Pairs{{0, 2}}));
  EXPECT_EQ(d3.evicted, (Ids{2}));
  EXPECT_EQ(slot_map(r.cache(0)), (std::vector<int>{5, 4, 0}));
  EXPECT_EQ(d3.replaced, 0);
}

TEST(Examples, ExactAPriorityUsesTokenPriorAndEmas) {
  RouterSpec spec = tiny(1);
  Calibration calib = simple_calibration(spec, 1.0f);
  // Token 7 at layer 0: expert 0 in 1 of 2 occurrences -> prior 0.5.
  calib.prior.layers = 1;
  calib.prior.vocab = 10;
  calib.prior.occurrences.assign(10, 0);
  calib.prior.occurrences[7] = 2;
  calib.prior.row_begin.assign(11, 0);
  for (int t = 8; t <= 10; ++t) calib.prior.row_begin[t] = 1;
  calib.prior.entries = {PriorEntry{0, 1}};
  calib.check("test calibration");
  RequestRouter r(spec, parse_policy("exact:evict=a"), calib, 3);

  // Step 1 (token 7): p = {0: 0.5, 1: 0, 2: 0}. 3 evicts 1 (p 0, lower index than 2), 4 evicts 2.
  r.begin_token(7);
  const Decision& d1 = r.select(0, std::vector<float>{0, 0, 0, 5, 4, 0});
  EXPECT_EQ(copies(d1.demand), (Pairs{{3, 1}, {4, 2}}));
  EXPECT_EQ(d1.evicted, (Ids{1, 2}));
  // After step 1: fast = 0.5, slow = 1 - 0.98 for experts 3 and 4.

  // Step 2 (token 8, no prior): S = {0, 5}; p(3) = p(4) = 0.5 + 0.02; p(0) = 0 but 0 is in S.
  // 5 evicts 3 (tie with 4, lower index) into slot 1.
  r.begin_token(8);
  const Decision& d2 = r.select(0, std::vector<float>{9, 0, 0, 0, 0, 8});
  EXPECT_EQ(copies(d2.demand), (Pairs{{5, 1}}));
  EXPECT_EQ(d2.evicted, (Ids{3}));
  EXPECT_EQ(slot_map(r.cache(0)), (std::vector<int>{0, 5, 4}));

  // Step 3 (token 8): S = {1, 2}. p: 0 -> 0.5 + 0.02 (selected at step 2), 4 -> 0.25 + 0.0196,
  // 5 -> 0.52. 1 evicts 4 (lowest p) into slot 2; 2 must evict from {0, 5} (tie at 0.52):
  // victim 0 (lower index) in slot 0.
  r.begin_token(8);
  const Decision& d3 = r.select(0, std::vector<float>{0, 9, 8, 0, 0, 0});
  EXPECT_EQ(copies(d3.demand), (Pairs{{1, 2}, {2, 0}}));
  EXPECT_EQ(d3.evicted, (Ids{4, 0}));
}

TEST(Examples, PsrSteersTowardPrefetchedExperts) {
  // Two layers, W = 3, n = 1, lambda = 0.5, range 2.0 -> bonus 1.0; A priority, no prior.
  RouterSpec spec = tiny(2);
  Calibration calib = simple_calibration(spec, 2.0f);
  RequestRouter r(spec, parse_policy("psr:lambda=0.5,n=1,w=3,evict=a"), calib, 3);
  r.begin_token(1);

  // Layer 0: z = [0, .5, 0, 1.2, 0, 0]; residents {0,1,2} get +1: biased [1, 1.5, 1, 1.2, 0, 0]
  // -> S = {1, 3} (= exact). 3 evicts 0 (all p = 0, lowest index) into slot 0.
  const Decision& d0 = r.select(0, std::vector<float>{0, 0.5f, 0, 1.2f, 0, 0});
  EXPECT_EQ(d0.selected, (Ids{1, 3}));
  EXPECT_EQ(copies(d0.demand), (Pairs{{3, 0}}));
  EXPECT_EQ(d0.replaced, 0);

  // Part 1 for layer 1: g = [4, 5, 0, ...]; 4 is inserted (evicting 0, slot 0); budget spent,
  // 5 and 0 are skipped.
  auto pf = r.prefetch(1, std::vector<float>{0, 0, 0, 0, 3, 2});
  EXPECT_EQ(copies(std::vector<Copy>(pf.begin(), pf.end())), (Pairs{{4, 0}}));
  EXPECT_EQ(slot_map(r.cache(1)), (std::vector<int>{4, 1, 2}));

  // Layer 1: z = [1.3, 0, 0, 1.2, .5, 0]; biased: 0 -> 1.3, 1 -> 1, 2 -> 1, 3 -> 1.2, 4 -> 1.5
  // -> S = {0, 4}; the exact top-2 is {0, 3}: one expert replaced (3 by the prefetched 4).
  // 0 must be demand-loaded: victims R \ (S u B) = {1, 2} -> 1 (slot 1).
  const Decision& d1 = r.select(1, std::vector<float>{1.3f, 0, 0, 1.2f, 0.5f, 0});
  EXPECT_EQ(d1.selected, (Ids{0, 4}));
  EXPECT_EQ(d1.exact, (Ids{0, 3}));
  EXPECT_EQ(d1.replaced, 1);
  EXPECT_EQ(copies(d1.prefetch), (Pairs{{4, 0}}));
  EXPECT_EQ(copies(d1.demand), (Pairs{{0, 1}}));
  EXPECT_EQ(d1.evicted, (Ids{0, 1}));
  EXPECT_EQ(slot_map(r.cache(1)), (std::vector<int>{4, 0, 2}));
  EXPECT_EQ(d1.selected_slot, (Ids{1, 0}));
}

TEST(Examples, BonusGatePrefetchesOnlyThePredictedSelection) {
  // E = 6, K = 2, C = 3, warm {0, 1, 2}; lambda 0.5 x range 2.0 -> bonus 1.0; n = 2.
  RouterSpec spec = tiny(2);
  Calibration calib = simple_calibration(spec, 2.0f);
  const std::vector<float> layer0{0, 0.5f, 0, 1.2f, 0, 0};
  {
    // Pre-gate [0, 0, 0, 0, 3, .5]. The window walk (w = 3) would insert 4 and 5. The predicted
    // selection: biased [1, 1, 1, 0, 3, .5] -> {4, 0} (0, 1, 2 tie at 1 and at z = 0: lowest
    // index). 0 is protected first; 4 evicts argmin over R \ B = {1, 2} -> 1 (slot 1); 5 is not
    // a candidate, so n = 2 still copies one expert.
    RequestRouter r(spec, parse_policy("psr:lambda=0.5,n=2,w=3,gate=bonus"), calib, 3);
    r.begin_token(1);
    r.select(0, layer0);
    const std::vector<float> pregate{0, 0, 0, 0, 3, 0.5f};
    auto pf = r.prefetch(1, pregate);
    EXPECT_EQ(copies(std::vector<Copy>(pf.begin(), pf.end())), (Pairs{{4, 1}}));
    EXPECT_EQ(r.decision(1).evicted, (Ids{1}));
    EXPECT_EQ(slot_map(r.cache(1)), (std::vector<int>{0, 4, 2}));
    // The prediction holds: biased [1, 0, 1, 0, 4, .5] -> S = {0, 4}, nothing demand-loaded;
    // the exact top-2 {4, 5} loses 5 to the resident 0 (.5 < 0 + 1), as under Cache-Prior.
    const Decision& d1 = r.select(1, pregate);
    EXPECT_EQ(d1.selected, (Ids{0, 4}));
    EXPECT_TRUE(d1.demand.empty());
    EXPECT_EQ(d1.replaced, 1);

    // The same step under the window gate, for contrast: 4 and 5 are both inserted.
    RequestRouter w(spec, parse_policy("psr:lambda=0.5,n=2,w=3"), calib, 3);
    w.begin_token(1);
    w.select(0, layer0);
    auto wpf = w.prefetch(1, pregate);
    EXPECT_EQ(wpf.size(), 2u);
  }
  {
    // Pre-gate [0, 0, 0, 0, .8, 0]: 4 leads the ranking but loses to the bonused residents
    // (.8 < 1): the predicted selection {0, 1} is resident, so nothing is copied.
    RequestRouter r(spec, parse_policy("psr:lambda=0.5,n=2,w=3,gate=bonus"), calib, 3);
    r.begin_token(1);
    r.select(0, layer0);
    auto pf = r.prefetch(1, std::vector<float>{0, 0, 0, 0, 0.8f, 0});
    EXPECT_TRUE(pf.empty());
    EXPECT_EQ(slot_map(r.cache(1)), (std::vector<int>{0, 1, 2}));
  }
}

TEST(Examples, UnboundedInsertionPrefetchesTheWholeWindow) {
  RouterSpec spec = tiny(2);
  Calibration calib = simple_calibration(spec, 2.0f);
  RequestRouter r(spec, parse_policy("psr:lambda=0.5,n=8,w=3"), calib, 3);
  r.begin_token(1);
  r.select(0, std::vector<float>{0, 0.5f, 0, 1.2f, 0, 0});
  // g[0:3] = [1, 4, 5]: 1 is resident and protected; 4 evicts 0 (slot 0), 5 evicts 2 (slot 2:
  // 1 is protected).
  auto pf = r.prefetch(1, std::vector<float>{0, 3, 0, 0, 2, 1});
  EXPECT_EQ(copies(std::vector<Copy>(pf.begin(), pf.end())), (Pairs{{4, 0}, {5, 2}}));
  EXPECT_EQ(r.decision(1).evicted, (Ids{0, 2}));
}

TEST(Examples, WindowWiderThanCacheStopsPartOne) {
  // C = K = 2: after protecting one resident and inserting one, nothing is evictable.
  RouterSpec spec = tiny(2);
  Calibration calib = simple_calibration(spec, 2.0f);
  RequestRouter r(spec, parse_policy("psr:lambda=0.5,n=8,w=4"), calib, 2);
  r.begin_token(1);
  r.select(0, std::vector<float>{1, 1, 0, 0, 0, 0});
  // Layer 1 warm {0, 1}. g = [0, 4, 5, 3]: 0 protected; 4 evicts 1; 5 finds R \ B empty: stop.
  auto pf = r.prefetch(1, std::vector<float>{4, 0, 0, 1, 3, 2});
  EXPECT_EQ(copies(std::vector<Copy>(pf.begin(), pf.end())), (Pairs{{4, 1}}));
}

TEST(Examples, CachePriorBonusesResidentsAndTopJ) {
  RouterSpec spec = tiny(1);
  Calibration calib = simple_calibration(spec, 2.0f);
  // lambda 0.5 * range 2 = bonus 1. z: resident 2 has 0.5 (+1 = 1.5); non-resident 3 has 1.4,
  // 4 has 1.45. Without J: S = {2, 4}... with j = 2: top-2 of z = {4, 3} also get the bonus:
  // biased 3 = 2.4, 4 = 2.45 -> S = {3, 4}.
  std::vector<float> z = {0, 0, 0.5f, 1.4f, 1.45f, 0};
  {
    RequestRouter r(spec, parse_policy("cacheprior:lambda=0.5"), calib, 3);
    r.begin_token(0);
    const Decision& d = r.select(0, z);
    EXPECT_EQ(d.selected, (Ids{2, 4}));
    EXPECT_EQ(d.replaced, 1);
    EXPECT_EQ(copies(d.demand), (Pairs{{4, 0}}));  // LRU tie among {0, 1}: 0
  }
  {
    RequestRouter r(spec, parse_policy("cacheprior:lambda=0.5,j=2"), calib, 3);
    r.begin_token(0);
    EXPECT_EQ(r.select(0, z).selected, (Ids{3, 4}));
  }
  {
    // Running range: this token's max - min = 1.45 -> bonus 0.725; 2 -> 1.225 < 1.4.
    RequestRouter r(spec, parse_policy("cacheprior:lambda=0.5,range=running"), calib, 3);
    r.begin_token(0);
    EXPECT_EQ(r.select(0, z).selected, (Ids{3, 4}));
  }
}

TEST(Examples, SpeculativeExecutionRunsThePregateRanking) {
  RouterSpec spec = tiny(2);
  Calibration calib = simple_calibration(spec, 2.0f);
  RequestRouter r(spec, parse_policy("spec:n=1,w=3"), calib, 3);
  r.begin_token(1);
  // Layer 1 (first MoE layer) uses its own router.
  EXPECT_EQ(r.select(0, std::vector<float>{0, 0, 5, 4, 0, 0}).selected, (Ids{2, 3}));
  r.prefetch(1, std::vector<float>{0, 0, 0, 0, 3, 2});  // g = [4, 5, ...]; 4 is prefetched
  // Layer 2 executes g[0:2] = {4, 5} whatever its router says; weights from the true logits.
  std::vector<float> z = {9, 8, 0, 0, 0, 1};
  const Decision& d = r.select(1, z);
  EXPECT_EQ(d.selected, (Ids{4, 5}));
  EXPECT_EQ(d.exact, (Ids{0, 1}));
  EXPECT_EQ(d.replaced, 2);
  ASSERT_TRUE(d.has_weights);
  float denom = 0;
  for (float v : z) denom += std::exp(v - 9.0f);
  EXPECT_FLOAT_EQ(d.weights[0], std::exp(0.0f - 9.0f) / denom);
  EXPECT_FLOAT_EQ(d.weights[1], std::exp(1.0f - 9.0f) / denom);
}

TEST(Examples, PhysicalModeBonusesIssuedCopiesNotResidents) {
  RouterSpec spec = tiny(1);
  Calibration calib = simple_calibration(spec, 2.0f);
  RequestRouter r(spec, parse_policy("physical:cacheprior:lambda=0.5"), calib, 3);
  std::vector<float> z = {0, 0, 0.5f, 1.4f, 1.45f, 0};
  std::vector<uint8_t> issued_none(6, 0), issued_two(6, 0);
  issued_two[2] = 1;
  r.begin_token(0);
  EXPECT_EQ(r.select(0, z, {}, issued_none).selected, (Ids{3, 4}));  // no bonus at all
  r.reset();
  r.begin_token(0);
  EXPECT_EQ(r.select(0, z, {}, issued_two).selected, (Ids{2, 4}));
  r.reset();
  r.begin_token(0);
  EXPECT_THROW(r.select(0, z), Error);  // the mask is required
}

TEST(Examples, ResetRestoresWarmSetAndClearsState) {
  RouterSpec spec = tiny(1);
  Calibration calib = simple_calibration(spec, 1.0f);
  calib.expert_order[0] = {5, 3, 1, 0, 2, 4};
  RequestRouter r(spec, parse_policy("exact:evict=a"), calib, 3);
  EXPECT_EQ(slot_map(r.cache(0)), (std::vector<int>{5, 3, 1}));
  r.begin_token(0);
  r.select(0, std::vector<float>{9, 0, 0, 0, 8, 0});
  EXPECT_NE(slot_map(r.cache(0)), (std::vector<int>{5, 3, 1}));
  r.reset();
  EXPECT_EQ(slot_map(r.cache(0)), (std::vector<int>{5, 3, 1}));
  EXPECT_EQ(r.step(), 0);
}

}  // namespace
}  // namespace steermoe::policy
