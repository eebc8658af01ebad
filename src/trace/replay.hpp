// Replays a trace through the one owner of the call order, schedule::OffloadStep (logical only),
// with the trace's rows as its driver: reset at each sequence start, then run_token per step,
// exactly the order the engine runs (docs/policy-contract.md, "Timing model"). Produces the
// decisions JSON lines (docs/trace-format.md) and a summary.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "policy/calibration.hpp"
#include "policy/router.hpp"
#include "trace/trace.hpp"

namespace steermoe::trace {

// One decisions line: {"t", "l", "S", "prefetch", "demand", "evicted", "resident"}.
struct DecisionRecord {
  int64_t t = 0;                       // step index in the trace
  int layer = 0;                       // MoE layer index (0-based)
  std::vector<int32_t> selected;       // S, ascending
  std::vector<policy::Copy> prefetch;  // [expert, slot] in emission order
  std::vector<policy::Copy> demand;    // [expert, slot] in emission order
  std::vector<int32_t> evicted;        // eviction order
  std::vector<int32_t> resident;       // sorted resident experts after the step
  bool operator==(const DecisionRecord& other) const;
};

// Appends one JSON line (with the trailing newline) to `out`.
void append_decision_line(std::string& out, int64_t t, int layer, std::span<const int32_t> selected,
                          std::span<const policy::Copy> prefetch,
                          std::span<const policy::Copy> demand, std::span<const int32_t> evicted,
                          std::span<const int32_t> resident);
std::string decision_line(const DecisionRecord& record);
// Parses one decisions line; throws "<where>: <field>: expected ..." on malformed input.
DecisionRecord parse_decision_line(std::string_view line, const std::string& where);

struct LayerTotals {
  uint64_t demand = 0;    // demand copies
  uint64_t prefetch = 0;  // prefetch copies (part 1 insertions)
  uint64_t evicted = 0;
  uint64_t replaced = 0;  // experts of S not in the router's own top-K
};

struct ReplaySummary {
  std::string policy_arg;  // as given
  std::string policy;      // canonical form
  int cache_slots = 0;
  std::string loop;  // "open" or "closed"
  std::string loop_reason;
  std::string trace;        // trace folder
  std::string calibration;  // calibration source
  int64_t tokens = 0;
  int64_t sequences = 0;
  int layers = 0;
  int top_k = 0;
  std::vector<LayerTotals> per_layer;

  LayerTotals totals() const;
  // Fraction of the router's top-K replaced: sum |S \ exact| / (tokens * layers * K).
  double replaced_fraction() const;
  nlohmann::json to_json() const;  // includes "summary": true
};

// Whether a trace's hidden states are those a policy would itself have produced ("closed"
// loop) or an approximation ("open"): closed when the trace was recorded under the same policy
// and cache size, or when both are exact routing (whose decisions do not depend on the cache).
struct LoopClass {
  std::string loop;    // "closed" or "open"
  std::string reason;  // human-readable why
};
// `calibration`: calibration_fingerprint() of the replay's calibration ("" = not known).
LoopClass classify_loop(const TraceMeta& meta, const policy::PolicyConfig& config,
                        const policy::RouterSpec& spec, int cache_slots,
                        const std::string& calibration = "");

struct ReplayOptions {
  std::string policy;                 // policy string
  int cache_slots = 0;                // C
  std::string calibration_source;     // for messages and the summary
  std::ostream* decisions = nullptr;  // decisions JSON lines (and the summary line) or null
  // Called with every decision as it is made (the Python module's replay), or empty. The
  // decision and the cache are valid during the call only.
  std::function<void(int64_t step, int layer, const policy::Decision& decision,
                     const policy::LayerCache& cache)>
      on_decision;
};

// Throws steermoe::Error for a bad policy string, cache size or a calibration that does not match
// the trace (naming the calibration source).
ReplaySummary replay_trace(const Trace& trace, const policy::Calibration& calibration,
                           const ReplayOptions& options);

// A short human-readable table of summaries (one row per policy).
std::string summary_table(std::span<const ReplaySummary> summaries);

}  // namespace steermoe::trace
