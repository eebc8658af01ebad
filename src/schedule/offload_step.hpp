// The one owner of the call order of offloaded MoE inference (docs/policy-contract.md, "Timing
// model"). It owns the token x layer loop, not only the body of each step, and calls a driver
// for what differs between its users: the engine's compute backend computes attention, router
// scores and the MoE; the simulator charges a hardware profile's durations; `replay` reads trace
// rows; the Python module and the HF harness hand in arrays. Nobody else writes
// `for layer ... host ... wait`.
//
// Schedules:
//   run_token(x_t, driver)            decode, token-major: for each MoE layer l, A(l) (the
//                                     driver's scores), H(l) = policy part 2 of l + part 1 of
//                                     l+1 + the scheduler's end of H(l), the wait on the slots
//                                     of S, M(l) (the driver's moe); then the driver's finish.
//   run_layer_major(tokens, driver)   batched prefill, logical only: every position of layer l
//                                     before layer l+1. Each layer's policy state depends only
//                                     on that layer's history, so it makes exactly the
//                                     token-major decisions.
//   run_block(tokens, alpha, driver)  speculative decoding's verification block: per layer one
//                                     eligible set for the k+1 positions
//                                     (policy/block_selection.hpp), every position routed
//                                     within it; a pool of P experts stays between blocks.
//                                     With a link, the layer's executed experts are placed in
//                                     its P + U slots (missing ones copied, evicting experts
//                                     outside the set and the pool first) and waited for
//                                     before its MoE: one token of the timing model.
//
// Without a link the step is logical only (routing decisions; no scheduler, no copies). With a
// link, a TransferScheduler turns the insertions into copies on it. With a simulated link and a
// hardware profile, the step also charges the profile's durations on the simulated clock, so
// that the simulator and an engine run under `--link sim:PROFILE` are one code path.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "link/link.hpp"
#include "policy/block_selection.hpp"
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
  int cache_slots = 0;  // C (K <= C <= E)
  // Slots per layer the scheduler and link hold (0: C). Verification blocks on a link hold the
  // pool and the union slots, P + U, of which the policy's C are the first (prompt tokens).
  int physical_slots = 0;
  int max_inflight = 2;      // prefetch copies in flight at a layer boundary (>= 1)
  int64_t expert_bytes = 0;  // bytes of one expert copy (accounting)
  int max_positions = 1;     // largest block run_layer_major is given
  PrefetchPacing pacing = PrefetchPacing::kFifo;   // when pending prefetches are copied
  PrefetchIssue issue = PrefetchIssue::kBoundary;  // where pending prefetches may be enqueued
  MoeWait moe_wait = MoeWait::kAll;                // when M(l) may start on a part of S
};

// Link-clock times of one MoE layer's events in the last token (seconds; the link's origin).
struct LayerTiming {
  double attention_start = 0;  // A(l) starts
  double host_start = 0;       // start of H(l)
  double host_end = 0;         // end of H(l), before the scheduler's enqueues
  double moe_start = 0;        // after the wait (MoeWait::kReady: the first part's start)
  double moe_end = 0;          // M(l) ended
  double moe_waits = 0;        // MoeWait::kReady: stalls between its parts (inside moe_start ..
                               // moe_end, and counted as stall: not compute)
};

// The router's output for one MoE layer at every position of the current block, rows [n][E].
struct LayerScores {
  std::span<const float> z;              // selection scores the policy ranks by
  std::span<const float> weight_scores;  // execution weights' scores (empty: softmax reuses z,
                                         // or no weights)
  std::span<const float> pregate_next;   // router of the next MoE layer on this layer's MoE
                                         // input (empty when the driver has none)
};

// What differs between the users of the call order.
class LayerDriver {
 public:
  virtual ~LayerDriver() = default;
  // A(layer): everything up to MoE layer `layer`'s router (attention, dense layers before it)
  // and that router's scores for every position. The spans stay valid until moe(layer) returns.
  virtual LayerScores scores(int layer) = 0;
  // The decision for `position` of the block at `layer` (valid during the call only), and the
  // pre-gate scores part 1 of this layer used there (empty when none).
  virtual void routed(int layer, int position, const policy::Decision& decision,
                      std::span<const float> pregate) = 0;
  // M(layer) over the decisions of every position; the copies into their slots have completed.
  virtual void moe(int /*layer*/) {}
  // MoeWait::kReady (decode, one position): M(layer) in parts. `picks` are positions in S
  // (ascending) whose copies have completed; the parts of one layer partition S, the first has
  // `first`, the last `last`. The driver must leave the layer's output as moe(layer) does,
  // bit for bit, whatever the split (each expert's output kept, summed in the order of S at the
  // last part). This default computes everything at the last part (no overlap, same output).
  virtual void moe_part(int layer, std::span<const int32_t> /*picks*/, bool /*first*/, bool last) {
    if (last) moe(layer);
  }
  // After the last MoE layer, inside the token's time: the rest of the network and the head.
  virtual void finish() {}
};

// Counts of the policy's logical decisions (every schedule; prompt tokens included).
struct LogicalCounts {
  int64_t tokens = 0;           // tokens routed
  int64_t layer_steps = 0;      // (token, MoE layer) steps
  int64_t replaced = 0;         // router top-K experts replaced by the policy (|S \ exact|)
  int64_t demand = 0;           // logical demand insertions
  int64_t prefetch = 0;         // logical prefetch insertions
  int64_t block_positions = 0;  // positions verified in blocks (run_block)
  int64_t block_copies = 0;     // experts a block needed outside the pool, all layers
  int64_t restore_copies = 0;   // rollback: slots given back their expert after a rejection
  int64_t block_prefetch = 0;   // verification blocks on a link: the next layer's early copies
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
  // Execution weights are the model's computation: replay and the simulator turn them off.
  void set_compute_weights(bool on) { router_.set_compute_weights(on); }
  // Benchmarks and tests force one top-k implementation (decisions are identical for all).
  void set_top_k_path(policy::TopKPath path) { router_.set_top_k_path(path); }

  // New sequence: every layer back to its warm set; with a link, warm-up copies (prompt time).
  void begin_request();

  // Decode: one token through every MoE layer in the timing model's order. Returns the token's
  // accounting (null without a link).
  const TokenStats* run_token(int32_t token, LayerDriver& driver);

  // Batched prefill, logical only: `tokens` (at most max_positions) layer-major.
  void run_layer_major(std::span<const int32_t> tokens, LayerDriver& driver);

  // One step of the layer-major schedule, for callers whose framework owns the layer loop (the
  // HF harness: transformers calls each MoE block for every position in turn): the step of
  // `layer` for input token `token`. `pregate`: router `layer` applied to the previous MoE
  // layer's input (empty for layer 0 or without part 1). The decision stays valid until the
  // next step of the same layer.
  const policy::Decision& route_layer_major(int layer, int32_t token,
                                            std::span<const float> pregate,
                                            std::span<const float> z,
                                            std::span<const float> weight_scores);

  // Turns on run_block with these rules (the step's calibration gives the warm pool).
  void enable_blocks(const policy::BlockParams& params, int max_positions);
  bool blocks_enabled() const { return selector_ != nullptr; }
  // Speculative decoding's verification block: `tokens` (at most the max_positions given to
  // enable_blocks) with position weights `alpha` (alpha[0] = 1). With a link the next plain
  // token needs a new request (begin_request): the policy's logical cache no longer describes
  // the slots.
  void run_block(std::span<const int32_t> tokens, std::span<const float> alpha,
                 LayerDriver& driver);
  // The block rules' state and the logical counts, saved and put back: a verification block
  // tried and undone leaves no trace (`kl --draft`'s counterfactual replay). Logical only.
  struct BlockCheckpoint {
    policy::BlockSelector::State selector;
    LogicalCounts counts;
  };
  void save_blocks(BlockCheckpoint& out) const;
  void restore_blocks(const BlockCheckpoint& in);

  // Speculative decoding's rollback (--spec-select rollback): the next `positions` steps may be
  // taken back; rollback(kept) keeps the first `kept` of them, every layer's logical cache as if
  // the others had never been routed (slots given back their expert: counts().restore_copies;
  // with a link, those whose physical content differs are copied again).
  void mark_rollback(int positions);
  void rollback(int kept);

  // True if the policy runs part 1 (needs pre-gate scores).
  bool prefetches() const;
  // True if the driver should compute pre-gate scores: the policy's part 1, or verification
  // blocks that copy the next layer's likely experts early on a link.
  bool wants_pregate() const;
  bool offloaded() const { return scheduler_ != nullptr; }
  const policy::RequestRouter& router() const { return router_; }
  // Null without a link. Read-only: the owner of the expert cache reads the physical slot map
  // and the totals; nobody drives the scheduler but this class.
  const TransferScheduler* scheduler() const { return scheduler_.get(); }
  const policy::PolicyConfig& config() const { return config_; }
  const LogicalCounts& counts() const { return counts_; }
  // Event times of MoE layer `layer` in the last token (link clock; zeros without a link).
  const LayerTiming& timing(int layer) const { return timings_[static_cast<size_t>(layer)]; }
  // Warm-up seconds of the last begin_request (0 without a link).
  double last_warmup_seconds() const { return warmup_s_; }

 private:
  double clock() const;
  void count(const policy::Decision& d);
  void keep_pregate(std::span<const float> rows, int n);
  // The router's expert of every slot, [L * C] layer-major (-1: empty), in slot_experts_.
  std::span<const int32_t> logical_slot_experts();
  std::span<const float> kept_pregate(int position) const;
  // The steps of run_token, in order.
  void begin_token(int32_t token);
  void begin_layer(int layer);
  const policy::Decision& host(int layer, std::span<const float> z,
                               std::span<const float> weight_scores,
                               std::span<const float> pregate_next);
  void wait(int layer);
  // wait + M(layer) by the driver, whole (MoeWait::kAll) or in parts (kReady); a simulated
  // clock charges M as it goes.
  void wait_and_compute(int layer, LayerDriver& driver);
  void end_layer(int layer);
  // A simulated clock's M(l) time for `experts` executed experts (plus the fixed share).
  void charge_moe(size_t experts, bool with_fixed);
  const TokenStats* end_token();
  // run_block with a link: puts the executed experts of `decisions` in slots of `layer`, fills
  // their selected_slot, waits for the copies.
  void place_block(int layer, std::span<policy::Decision> decisions);
  // run_block with a link: copies the next layer's experts the rule is sure to execute, by the
  // router of that layer on this layer's output (`pregate_next`), rank by rank, into its slots
  // outside the pool, without waiting.
  void prefetch_block_layer(int layer, int n, std::span<const float> pregate_next,
                            std::span<const float> alpha);

  policy::PolicyConfig config_;
  policy::RequestRouter router_;
  std::unique_ptr<policy::BlockSelector> selector_;  // run_block's rules, when enabled
  const policy::Calibration* calibration_;
  link::Link* link_ = nullptr;
  std::unique_ptr<TransferScheduler> scheduler_;
  link::SimulatedLink* sim_clock_ = nullptr;
  const HardwareProfile* profile_ = nullptr;
  int experts_ = 0;
  int max_positions_ = 1;
  int physical_slots_ = 0;   // scheduler slots per layer (>= the policy's C)
  bool blocks_ran_ = false;  // a block placed experts since begin_request (link only)
  // run_block's placement scratch (link only), sized once.
  std::vector<int32_t> slot_of_;       // [E] slot holding the expert in the current layer, -1
  std::vector<int32_t> block_union_;   // executed experts of the layer, first-use order
  std::vector<int32_t> union_slots_;   // their slots
  std::vector<int32_t> victims_;       // slots free for the layer's missing experts
  std::vector<uint8_t> needed_;        // [E]
  std::vector<int32_t> ranked_;        // [n][K] top-K of pre-gate rows (early block copies)
  std::vector<int32_t> order_;         // [E] scratch
  std::vector<int32_t> slot_experts_;  // [L * C] scratch for begin_request
  std::vector<LayerTiming> timings_;   // [L]
  MoeWait moe_wait_ = MoeWait::kAll;
  // wait_and_compute's scratch under MoeWait::kReady, [K] each: positions of S not computed
  // yet, and the part computed next.
  std::vector<int32_t> moe_left_, moe_part_;
  // The pre-gate scores of the current layer (from the previous layer's driver scores), rows
  // [max_positions][E]: the driver's buffers may be overwritten by the next layer's scores.
  std::vector<float> pregate_;
  bool pregate_valid_ = false;
  LogicalCounts counts_;
  int host_layer_ = -1;
  double warmup_s_ = 0;
};

}  // namespace steermoe::schedule
