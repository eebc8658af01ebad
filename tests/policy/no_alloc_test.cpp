// Proves the hot path allocates nothing after warm-up: a global operator new counts calls while
// a router runs steady-state steps of every policy.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <random>
#include <vector>

#include "policy/router.hpp"

namespace {
std::atomic<long> g_allocations{0};
}

// Every replaceable allocation form is counted and forwarded to malloc/free, so that no library
// call (std::stable_sort uses the nothrow form) mixes allocators under AddressSanitizer.
namespace {
void* counted_alloc(std::size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  return std::malloc(n ? n : 1);
}
void* counted_alloc_or_throw(std::size_t n) {
  if (void* p = counted_alloc(n)) return p;
  throw std::bad_alloc();
}
}  // namespace

void* operator new(std::size_t n) { return counted_alloc_or_throw(n); }
void* operator new[](std::size_t n) { return counted_alloc_or_throw(n); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept { return counted_alloc(n); }
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept { return counted_alloc(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }

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
        "psr:lambda=0.3,n=1", "psr:lambda=0.3,n=8", "spec:n=1"}) {
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
    const long before = g_allocations.load();
    run(200);
    r.reset();
    run(50);
    EXPECT_EQ(g_allocations.load() - before, 0) << policy;
  }
}

}  // namespace
}  // namespace steermoe::policy
