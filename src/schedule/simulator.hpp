// The timing simulator: the routing policy (policy::RequestRouter) and the transfer scheduler
// run over a trace on the simulated-clock link, with durations from a hardware profile. It is
// not a second implementation of either: the engine will run the same two classes against a
// real link. No file I/O here: the caller hands in the trace arrays.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "link/simulated_link.hpp"
#include "policy/calibration.hpp"
#include "policy/config.hpp"
#include "schedule/offload_step.hpp"
#include "schedule/profile.hpp"
#include "schedule/scheduler.hpp"

namespace steermoe::schedule {

// The arrays of a router trace (docs/trace-format.md), flat and row-major.
struct TraceView {
  int layers = 0;
  int experts = 0;
  std::span<const int32_t> tokens;           // [T]
  std::span<const float> scores;             // [T * L * E]: selection scores z
  std::span<const float> pregate;            // [T * L * E]: row l = router l on layer l-1's input
  std::span<const int64_t> sequence_starts;  // step where each request starts; empty = {0}

  int64_t steps() const { return static_cast<int64_t>(tokens.size()); }
  std::span<const float> score_row(int64_t t, int layer) const { return row(scores, t, layer); }
  std::span<const float> pregate_row(int64_t t, int layer) const { return row(pregate, t, layer); }

 private:
  std::span<const float> row(std::span<const float> a, int64_t t, int layer) const {
    const size_t e = static_cast<size_t>(experts);
    return a.subspan((static_cast<size_t>(t) * static_cast<size_t>(layers) + layer) * e, e);
  }
};

// One MoE layer of one token on the simulated clock (recorded only on request: tests): the step's
// event times of that layer (A(l), H(l), M(l)) and the slots of S.
struct LayerEvent : LayerTiming {
  int64_t step = 0;
  int layer = 0;
  std::vector<int32_t> slots;  // slots of S
};

struct SimOptions {
  int cache_slots = 0;  // C
  int max_inflight = 2;
  PrefetchPacing pacing = PrefetchPacing::kFifo;
  PrefetchIssue issue = PrefetchIssue::kBoundary;
  MoeWait moe_wait = MoeWait::kAll;
  bool keep_decisions = false;  // keep S of every (step, layer) in SimResult::decisions
  bool keep_events = false;     // keep LayerEvent per (step, layer) and the link's copy log
};

struct SimResult {
  std::string policy;  // canonical policy string
  RunTotals totals;
  std::vector<double> token_latency;  // seconds, per decode token in trace order
  std::vector<int32_t> token_copies;  // copies enqueued per token
  double mean_s = 0, p50_s = 0, p99_s = 0;
  uint64_t decision_hash = 0;           // FNV-1a over (step, layer, S) of every step
  std::vector<int32_t> decisions;       // [T * L * K] when keep_decisions
  std::vector<LayerEvent> events;       // when keep_events
  std::vector<link::CopyEvent> copies;  // the link's log, when keep_events
  int64_t pending_at_end = 0;           // prefetches still pending after the last step
  int64_t token_layers = 0;
  double link_busy_s = 0;       // seconds the link spent copying (decode and prompt)
  double resident_token_s = 0;  // the profile's compute floor for this trace's L and K
};

// Runs `config` over every step of `trace`. Throws steermoe::Error when the trace, the policy
// and the cache size do not fit together.
SimResult simulate(const policy::RouterSpec& spec, const policy::PolicyConfig& config,
                   const policy::Calibration& calibration, const HardwareProfile& profile,
                   const TraceView& trace, const SimOptions& options);

// Nearest-rank percentile (q in [0, 1]) of `values` (copied and sorted).
double percentile(std::span<const double> values, double q);

}  // namespace steermoe::schedule
