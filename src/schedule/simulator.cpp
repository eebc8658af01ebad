#include "schedule/simulator.hpp"

#include <algorithm>
#include <cmath>

#include "common/error.hpp"
#include "link/simulated_link.hpp"
#include "policy/router.hpp"

namespace steermoe::schedule {

namespace {

constexpr uint64_t kFnvOffset = 1469598103934665603ull;
constexpr uint64_t kFnvPrime = 1099511628211ull;

void hash_in(uint64_t& h, int64_t value) {
  for (int i = 0; i < 8; ++i) {
    h ^= static_cast<uint64_t>(value >> (8 * i)) & 0xffu;
    h *= kFnvPrime;
  }
}

void check_inputs(const policy::RouterSpec& spec, const policy::Calibration& calibration,
                  const TraceView& trace, const SimOptions& options) {
  const std::string where = "sim";
  if (trace.layers != spec.layers || trace.experts != spec.experts)
    fail(where, "trace", "expected {} layers x {} experts (the model), got {} x {}", spec.layers,
         spec.experts, trace.layers, trace.experts);
  const size_t cells = static_cast<size_t>(trace.steps()) * trace.layers * trace.experts;
  if (trace.scores.size() != cells || trace.pregate.size() != cells)
    fail(where, "trace", "expected scores and pregate of {} values each", cells);
  if (calibration.layers != spec.layers || calibration.experts != spec.experts)
    fail(where, "calibration", "expected {} layers x {} experts (the trace), got {} x {}",
         spec.layers, spec.experts, calibration.layers, calibration.experts);
  if (options.max_inflight < 1)
    fail(where, "--max-inflight", "expected >= 1, got {}", options.max_inflight);
  int64_t previous = -1;
  for (const int64_t start : trace.sequence_starts) {
    if (start <= previous || start >= std::max<int64_t>(trace.steps(), 1))
      fail(where, "sequence starts", "expected strictly increasing steps in [0, {}), got {}",
           trace.steps(), start);
    previous = start;
  }
  if (!trace.sequence_starts.empty() && trace.sequence_starts.front() != 0)
    fail(where, "sequence starts", "expected the first sequence to start at step 0");
}

}  // namespace

double percentile(std::span<const double> values, double q) {
  if (values.empty()) return 0.0;
  std::vector<double> sorted(values.begin(), values.end());
  std::sort(sorted.begin(), sorted.end());
  const double rank = std::ceil(q * static_cast<double>(sorted.size()));
  const size_t index = static_cast<size_t>(std::clamp(rank, 1.0, double(sorted.size()))) - 1;
  return sorted[index];
}

SimResult simulate(const policy::RouterSpec& spec, const policy::PolicyConfig& config,
                   const policy::Calibration& calibration, const HardwareProfile& profile,
                   const TraceView& trace, const SimOptions& options) {
  check_inputs(spec, calibration, trace, options);
  policy::validate(config, spec, options.cache_slots);
  const int layers = spec.layers;
  const int slots = options.cache_slots;

  link::SimulatedLink link({.bandwidth_bytes_per_s = profile.link_bandwidth_bytes_per_s,
                            .latency_s = profile.link_latency_s});
  link.enable_log(options.keep_events);
  TransferScheduler scheduler({.layers = layers,
                               .experts = spec.experts,
                               .slots = slots,
                               .max_inflight = options.max_inflight,
                               .expert_bytes = profile.expert_bytes},
                              link);
  policy::RequestRouter router(spec, config, calibration, slots);

  SimResult result;
  result.policy = config.to_string();
  result.resident_token_s = profile.resident_token_seconds(layers, spec.top_k);
  const int64_t steps = trace.steps();
  result.token_latency.reserve(static_cast<size_t>(steps));
  result.token_copies.reserve(static_cast<size_t>(steps));
  if (options.keep_decisions)
    result.decisions.reserve(static_cast<size_t>(steps) * layers * spec.top_k);
  uint64_t hash = kFnvOffset;

  std::vector<int32_t> slot_experts(static_cast<size_t>(layers) * slots);
  const std::vector<int64_t> single_request{0};
  const std::span<const int64_t> starts = trace.sequence_starts.empty()
                                              ? std::span<const int64_t>(single_request)
                                              : trace.sequence_starts;
  const std::span<const uint8_t> no_mask;
  size_t next_request = 0;
  for (int64_t t = 0; t < steps; ++t) {
    if (next_request < starts.size() && starts[next_request] == t) {
      ++next_request;
      router.reset();
      for (int l = 0; l < layers; ++l) {
        for (int s = 0; s < slots; ++s)
          slot_experts[static_cast<size_t>(l) * slots + s] = router.cache(l).expert_in_slot(s);
      }
      scheduler.begin_request(slot_experts);
    }
    router.begin_token(trace.tokens[static_cast<size_t>(t)]);
    scheduler.begin_token();
    link.advance(profile.dense_s);
    for (int l = 0; l < layers; ++l) {
      LayerEvent event;
      event.attention_start = link.now();
      link.advance(profile.attention_s);  // A(l)
      event.host_start = link.now();
      const std::span<const uint8_t> issued = scheduler.begin_host(l);
      const policy::Decision& d =
          router.select(l, trace.score_row(t, l), {}, config.physical ? issued : no_mask);
      std::span<const policy::Copy> prefetch;
      if (l + 1 < layers) prefetch = router.prefetch(l + 1, trace.pregate_row(t, l + 1));
      link.advance(profile.host_policy_s);  // H(l)
      event.host_end = link.now();
      scheduler.end_host(l, d.selected, d.selected_slot, d.demand, prefetch);
      scheduler.wait_for_layer(l, d.selected_slot);
      event.moe_start = link.now();
      link.advance(profile.moe_fixed_s +
                   static_cast<double>(d.selected.size()) * profile.moe_per_expert_s);  // M(l)
      event.moe_end = link.now();
      hash_in(hash, t);
      hash_in(hash, l);
      for (const int32_t e : d.selected) hash_in(hash, e);
      if (options.keep_decisions)
        result.decisions.insert(result.decisions.end(), d.selected.begin(), d.selected.end());
      if (options.keep_events) {
        event.step = t;
        event.layer = l;
        event.slots.assign(d.selected_slot.begin(), d.selected_slot.end());
        result.events.push_back(std::move(event));
      }
    }
    link.advance(profile.head_s);
    const TokenStats& token = scheduler.end_token();
    result.token_latency.push_back(token.latency);
    result.token_copies.push_back(token.copies());
  }

  result.totals = scheduler.totals();
  result.pending_at_end = scheduler.pending_count();
  result.token_layers = steps * layers;
  result.decision_hash = hash;
  result.link_busy_s = link.busy_seconds();
  if (steps > 0) {
    double sum = 0;
    for (const double x : result.token_latency) sum += x;
    result.mean_s = sum / static_cast<double>(steps);
    result.p50_s = percentile(result.token_latency, 0.5);
    result.p99_s = percentile(result.token_latency, 0.99);
  }
  if (options.keep_events) result.copies = link.log();
  return result;
}

}  // namespace steermoe::schedule
