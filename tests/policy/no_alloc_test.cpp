// Proves the hot path allocates nothing after warm-up: the global operator new of
// tests/alloc_counter.cpp counts calls while a router runs steady-state steps of every policy.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "../alloc_counter.hpp"
#include "policy/router.hpp"

namespace steermoe::policy {
namespace {

TEST(NoAllocation, SteadyStatePolicyStepsAllocateNothing) {
  RouterSpec spec{.experts = 64, .top_k = 8, .layers = 4};
  Calibrator calibrator(spec, 100);
  std::mt19937 rng(1);
  std::normal_distribution<float> noise;
  std::vector<float> z(64), g(64);
  for (int t = 0; t < 50; ++t) {
    for (int l = 0; l < 4; ++l) {
      for (auto& v : z) v = noise(rng);
      calibrator.add(l, t % 100, z);
    }
    calibrator.end_step();
  }
  const Calibration calib = calibrator.finish();
  for (const char* policy :
       {"exact:evict=lru", "exact:evict=a,n=2", "cacheprior:lambda=0.2,j=2,range=running",
        "psr:lambda=0.3,n=1", "psr:lambda=0.3,n=8", "spec:n=1", "psr:lambda=0.3,n=2,gate=bonus"}) {
    RequestRouter r(spec, parse_policy(policy), calib, 32);
    auto run = [&](int steps) {
      for (int t = 0; t < steps; ++t) {
        r.begin_token(t % 100);
        for (int l = 0; l < 4; ++l) {
          for (auto& v : z) v = noise(rng);
          for (auto& v : g) v = noise(rng);
          r.select(l, z);
          if (l + 1 < 4) r.prefetch(l + 1, g);
        }
      }
    };
    run(10);  // warm-up
    test_support::start_counting_allocations();
    run(200);
    r.reset();
    run(50);
    EXPECT_EQ(test_support::stop_counting_allocations(), 0) << policy;
  }
}

}  // namespace
}  // namespace steermoe::policy
