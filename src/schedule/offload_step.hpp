// The one owner of the per-token call order of offloaded MoE decoding (docs/policy-contract.md,
// "Timing model"): for each token, for each MoE layer l, A(l) on compute, then H(l) on the host
// (policy part 2 of layer l, part 1 of layer l+1, the scheduler's end of H(l)), the wait on the
// slots of S, then M(l). The engine, the simulator and `replay` all drive this class; nobody
// else writes that order.
//
//   begin_request();                       // new sequence: warm set, warm-up copies
//   begin_token(x_t);
//   for each MoE layer l:
//     begin_layer(l);                      // A(l) starts
//     d = host(l, z, weight_scores, pregate of layer l+1 from this layer's MoE input);
//     wait(l);                             // stall before M(l)
//     [M(l) over d.selected in d.selected_slot]
//     end_layer(l);
//   end_token();
//
// Without a link the step is logical only (routing decisions; no scheduler, no copies). With a
// link, a TransferScheduler turns the insertions into copies on it. With a simulated link and a
// hardware profile, the step also charges the profile's durations on the simulated clock, so
// that the simulator and an engine run under `--link sim:PROFILE` are one code path.
//
// Batched prefill (logical only): route_layer_major() advances one layer by one token, so the
// layer-major order of a batched forward pass makes exactly the token-major decisions.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "link/link.hpp"
#include "policy/calibration.hpp"
#include "policy/config.hpp"
#include "policy/router.hpp"
#include "schedule/scheduler.hpp"

namespace steermoe::link {
class SimulatedLink;
}

namespace steermoe::schedule {

struct HardwareProfile;

struct OffloadParams {
  int cache_slots = 0;       // C (K <= C <= E)
  int max_inflight = 2;      // prefetch copies in flight at a layer boundary (>= 1)
  int64_t expert_bytes = 0;  // bytes of one expert copy (accounting)
};

// Link-clock times of the last MoE layer's events (seconds; the link's origin).
struct LayerTiming {
  double attention_start = 0;  // begin_layer
  double host_start = 0;       // start of H(l)
  double host_end = 0;         // end of H(l), before the scheduler's enqueues
  double moe_start = 0;        // after the wait
  double moe_end = 0;          // end_layer
};

class OffloadStep {
 public:
  // `link` may be null (logical only). `calibration` must outlive the step.
  OffloadStep(const policy::RouterSpec& spec, const policy::PolicyConfig& config,
              const policy::Calibration& calibration, const OffloadParams& params,
              link::Link* link = nullptr);
  ~OffloadStep();
  OffloadStep(const OffloadStep&) = delete;
  OffloadStep& operator=(const OffloadStep&) = delete;

  // Charges `profile`'s durations on `clock` (which must be the link given above): the
  // simulator, and the engine's `sim:PROFILE` link. Both pointers must outlive the step.
  void simulate_compute(link::SimulatedLink* clock, const HardwareProfile* profile);

  // New sequence: every layer back to its warm set; with a link, warm-up copies (prompt time).
  void begin_request();
  void begin_token(int32_t token);
  void begin_layer(int layer);
  // H(layer). `pregate_next`: router layer+1 applied to this layer's MoE input (empty for the
  // last layer, or when the policy has no part 1). The decision stays valid until the next
  // host() or route_layer_major() of the same layer.
  const policy::Decision& host(int layer, std::span<const float> z,
                               std::span<const float> weight_scores,
                               std::span<const float> pregate_next);
  // Waits until the latest copy into every slot of S has completed; returns the stall (s).
  double wait(int layer);
  void end_layer(int layer);
  // Ends the token; returns its accounting (null without a link).
  const TokenStats* end_token();

  // Batched prefill, logical only: the step of `layer` for input token `token`. `pregate`: router
  // `layer` applied to the previous MoE layer's input (empty for layer 0 or without part 1).
  const policy::Decision& route_layer_major(int layer, int32_t token,
                                            std::span<const float> pregate,
                                            std::span<const float> z,
                                            std::span<const float> weight_scores);

  // True if the policy runs part 1 (needs pre-gate scores).
  bool prefetches() const;
  bool offloaded() const { return scheduler_ != nullptr; }
  const policy::RequestRouter& router() const { return router_; }
  policy::RequestRouter& router() { return router_; }
  // Null without a link.
  TransferScheduler* scheduler() { return scheduler_.get(); }
  const TransferScheduler* scheduler() const { return scheduler_.get(); }
  const policy::PolicyConfig& config() const { return config_; }
  const LayerTiming& timing() const { return timing_; }
  // Warm-up seconds of the last begin_request (0 without a link).
  double last_warmup_seconds() const { return warmup_s_; }

 private:
  double clock() const;

  policy::PolicyConfig config_;
  policy::RequestRouter router_;
  link::Link* link_ = nullptr;
  std::unique_ptr<TransferScheduler> scheduler_;
  link::SimulatedLink* sim_clock_ = nullptr;
  const HardwareProfile* profile_ = nullptr;
  std::vector<int32_t> slot_experts_;  // [L * C] scratch for begin_request
  LayerTiming timing_;
  int host_layer_ = -1;
  double warmup_s_ = 0;
};

}  // namespace steermoe::schedule
