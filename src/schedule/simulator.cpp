#include "schedule/simulator.hpp"

#include <algorithm>
#include <cmath>

#include "common/error.hpp"
#include "link/simulated_link.hpp"
#include "policy/router.hpp"
#include "schedule/offload_step.hpp"

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
  policy::check_calibration_shape(calibration, spec, where, "calibration", "the trace's");
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

  link::SimulatedLink link(profile.link_params());
  link.enable_log(options.keep_events);
  OffloadStep step(spec, config, calibration,
                   {.cache_slots = slots,
                    .max_inflight = options.max_inflight,
                    .expert_bytes = profile.expert_bytes,
                    .pacing = options.pacing,
                    .issue = options.issue,
                    .moe_wait = options.moe_wait},
                   &link);
  step.simulate_compute(&link, &profile);
  // Execution weights are the model's computation, not the policy's: the trace has no weight
  // scores to compute them from.
  step.set_compute_weights(false);
  const TransferScheduler& scheduler = *step.scheduler();

  SimResult result;
  result.policy = config.to_string();
  result.resident_token_s = profile.resident_token_seconds(layers, spec.top_k);
  const int64_t steps = trace.steps();
  result.token_latency.reserve(static_cast<size_t>(steps));
  result.token_copies.reserve(static_cast<size_t>(steps));
  if (options.keep_decisions)
    result.decisions.reserve(static_cast<size_t>(steps) * layers * spec.top_k);

  // The trace's rows are the driver: A(l) reads them, the decisions are hashed as they come.
  struct TraceDriver final : LayerDriver {
    const TraceView& trace;
    const SimOptions& options;
    SimResult& result;
    int layers;
    int64_t t = 0;
    uint64_t hash = kFnvOffset;
    TraceDriver(const TraceView& v, const SimOptions& o, SimResult& r, int l)
        : trace(v), options(o), result(r), layers(l) {}
    LayerScores scores(int l) override {
      return {
          .z = trace.score_row(t, l),
          .pregate_next = l + 1 < layers ? trace.pregate_row(t, l + 1) : std::span<const float>{}};
    }
    void routed(int l, int /*position*/, const policy::Decision& d,
                std::span<const float> /*pregate*/) override {
      hash_in(hash, t);
      hash_in(hash, l);
      for (const int32_t e : d.selected) hash_in(hash, e);
      if (options.keep_decisions)
        result.decisions.insert(result.decisions.end(), d.selected.begin(), d.selected.end());
    }
  } driver(trace, options, result, layers);

  const std::vector<int64_t> single_request{0};
  const std::span<const int64_t> starts = trace.sequence_starts.empty()
                                              ? std::span<const int64_t>(single_request)
                                              : trace.sequence_starts;
  size_t next_request = 0;
  for (int64_t t = 0; t < steps; ++t) {
    if (next_request < starts.size() && starts[next_request] == t) {
      ++next_request;
      step.begin_request();
    }
    driver.t = t;
    const TokenStats& token = *step.run_token(trace.tokens[static_cast<size_t>(t)], driver);
    if (options.keep_events) {
      for (int l = 0; l < layers; ++l) {
        const policy::Decision& d = step.router().decision(l);
        LayerEvent event;
        static_cast<LayerTiming&>(event) = step.timing(l);
        event.step = t;
        event.layer = l;
        event.slots.assign(d.selected_slot.begin(), d.selected_slot.end());
        result.events.push_back(std::move(event));
      }
    }
    result.token_latency.push_back(token.latency);
    result.token_copies.push_back(token.copies());
  }

  result.totals = scheduler.totals();
  result.pending_at_end = scheduler.pending_count();
  result.token_layers = steps * layers;
  result.decision_hash = driver.hash;
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
