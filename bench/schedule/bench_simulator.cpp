// Simulator throughput: token-layers per second of policy + scheduler on the simulated clock,
// on an OLMoE-shaped random trace (16 layers, 64 experts, top-8) at 50% residency. The issue's
// floor is 100k token-layers/s; the counter `token_layers_per_s` reports it.
#include <benchmark/benchmark.h>

#include "schedule/simulator.hpp"
#include "synthetic.hpp"

namespace steermoe::schedule {
namespace {

HardwareProfile olmoe_profile() {
  HardwareProfile p;
  p.name = "rtx4090-olmoe (inline copy)";
  p.link_bandwidth_bytes_per_s = 22.9e9;
  p.expert_bytes = 12582912;
  p.attention_s = 150e-6;
  p.moe_fixed_s = 66.25e-6;
  p.moe_per_expert_s = 21.25e-6;
  p.head_s = 300e-6;
  p.host_policy_s = 20e-6;
  return p;
}

const testing::SyntheticTrace& trace() {
  static const testing::SyntheticTrace t = testing::make_trace(16, 64, 8, 1000, 4, 2, 7, 512);
  return t;
}
const policy::Calibration& calibration() {
  static const policy::Calibration c =
      testing::calibrate(testing::make_trace(16, 64, 8, 1000, 4, 1, 7, 512));
  return c;
}

void BM_Simulate(benchmark::State& state, const char* policy_text) {
  const policy::PolicyConfig config = policy::parse_policy(policy_text);
  const HardwareProfile profile = olmoe_profile();
  int64_t token_layers = 0;
  double ms = 0;
  for (auto _ : state) {
    const SimResult r = simulate(trace().spec, config, calibration(), profile, trace().view(),
                                 {.cache_slots = 32, .max_inflight = 2});
    token_layers += r.token_layers;
    ms = r.mean_s * 1e3;
    benchmark::DoNotOptimize(r.decision_hash);
  }
  state.counters["token_layers_per_s"] =
      benchmark::Counter(static_cast<double>(token_layers), benchmark::Counter::kIsRate);
  state.counters["sim_ms_per_token"] = ms;
}

BENCHMARK_CAPTURE(BM_Simulate, exact_lru, "exact:evict=lru")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Simulate, cacheprior, "cacheprior:lambda=0.2")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Simulate, psr_n1, "psr:lambda=0.3,n=1")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Simulate, psr_n8, "psr:lambda=0.3,n=8")->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace steermoe::schedule

BENCHMARK_MAIN();
