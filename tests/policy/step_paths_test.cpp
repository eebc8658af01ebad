// The whole policy step is identical, decision for decision, whatever top-k path the router is
// forced to: kReference runs the contract's three plain selections with the scalar top-k, the
// vector paths run the fused selection (router top-K, continuation over the bonused set, merge).
// Random scores with heavy ties (also between bonused and unbonused scores), every size from 1 to
// 300 experts, random K, C, J and policies.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "policy/router.hpp"

namespace steermoe::policy {
namespace {

// Decisions of `steps` tokens flattened: S, exact, copies, evictions, replaced, weight bits.
std::vector<int64_t> run_path(const RouterSpec& spec, const Calibration& calib,
                              const std::string& policy, int cache, TopKPath path,
                              const std::vector<float>& z, const std::vector<float>& g,
                              const std::vector<uint8_t>& issued, int steps) {
  RequestRouter r(spec, parse_policy(policy), calib, cache);
  r.set_top_k_path(path);
  const int e = spec.experts;
  std::vector<int64_t> flat;
  for (int t = 0; t < steps; ++t) {
    r.begin_token(t % 7);
    for (int l = 0; l < spec.layers; ++l) {
      const size_t row = (static_cast<size_t>(t) * spec.layers + l) * e;
      const std::span<const float> zs(&z[row], e);
      const std::span<const uint8_t> is(&issued[row], e);
      const Decision& d =
          r.select(l, zs, zs, parse_policy(policy).physical ? is : std::span<const uint8_t>{});
      flat.insert(flat.end(), d.selected.begin(), d.selected.end());
      flat.push_back(-1);
      flat.insert(flat.end(), d.exact.begin(), d.exact.end());
      for (const Copy& c : d.prefetch) flat.insert(flat.end(), {-2, c.expert, c.slot});
      for (const Copy& c : d.demand) flat.insert(flat.end(), {-3, c.expert, c.slot});
      flat.insert(flat.end(), d.evicted.begin(), d.evicted.end());
      flat.push_back(d.replaced);
      for (float w : d.weights) {
        uint32_t bits;
        std::memcpy(&bits, &w, sizeof bits);
        flat.push_back(bits);
      }
      if (l + 1 < spec.layers) {
        for (const Copy& c : r.prefetch(l + 1, std::span<const float>(&g[row + e], e))) {
          flat.insert(flat.end(), {-4, c.expert, c.slot});
        }
      }
    }
  }
  return flat;
}

TEST(StepPaths, EveryPathMakesTheReferenceDecisions) {
  std::mt19937 rng(2026);
  const int layers = 2, steps = 10;
  for (int e = 1; e <= 300; ++e) {
    const int k = 1 + static_cast<int>(rng() % std::min(e, 8));
    const int cache = k + static_cast<int>(rng() % (e - k + 1));
    const int j = static_cast<int>(rng() % (k + 1));
    const bool heavy_ties = e % 2 == 0;
    RouterSpec spec{.experts = e, .top_k = k, .layers = layers};
    auto draw = [&] {
      return heavy_ties ? static_cast<float>(rng() % 4)
                        : std::ldexp(static_cast<float>(rng() % 100000), -12);
    };
    std::vector<float> z(static_cast<size_t>(steps) * layers * e), g(z.size());
    std::vector<uint8_t> issued(z.size());
    for (size_t i = 0; i < z.size(); ++i) {
      z[i] = draw();
      g[i] = heavy_ties ? z[i] : z[i] + draw();
      issued[i] = static_cast<uint8_t>(rng() % 3 == 0);
    }
    // Calibration rows span exactly 3, so the fixed range is 3 and lambda 1/3 makes the bonus
    // exactly 1: bonused residents tie with non-residents of the integer scores.
    Calibrator calibrator(spec, 7);
    std::vector<float> cal_row(e);
    for (int i = 0; i < e; ++i) cal_row[i] = static_cast<float>(3 * (i % 2));
    for (int t = 0; t < steps; ++t) {
      for (int l = 0; l < layers; ++l) calibrator.add(l, t % 7, cal_row);
      calibrator.end_step();
    }
    const Calibration calib = calibrator.finish();
    const std::string jj = ",j=" + std::to_string(j);
    for (const std::string& policy :
         {std::string("psr:lambda=0.3,n=1"), std::string("psr:lambda=0.33333334,n=1"),
          "cacheprior:lambda=0.33333334" + jj, "psr:lambda=0.3,n=2,evict=lru" + jj,
          "cacheprior:lambda=0.2" + jj, "cacheprior:lambda=0.5,range=running,n=1" + jj,
          "physical:psr:lambda=0.3,n=1" + jj, std::string("psr:lambda=3,n=1"),
          "psr:lambda=0.33333334,n=2,gate=bonus" + jj,
          "cacheprior:lambda=0.2,n=1,range=running,gate=bonus" + jj,
          std::string("exact:evict=a,n=1"), std::string("spec:n=1")}) {
      const auto ref =
          run_path(spec, calib, policy, cache, TopKPath::kReference, z, g, issued, steps);
      for (TopKPath path : {TopKPath::kAuto, TopKPath::kSse2, TopKPath::kAvx2, TopKPath::kAvx512}) {
        ASSERT_EQ(run_path(spec, calib, policy, cache, path, z, g, issued, steps), ref)
            << policy << " E=" << e << " K=" << k << " C=" << cache
            << " path=" << static_cast<int>(path);
      }
    }
  }
}

}  // namespace
}  // namespace steermoe::policy
