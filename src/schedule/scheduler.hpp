// The transfer scheduler: turns the routing policy's logical insertions into copies on one Link
// and decides when each MoE layer may run (docs/policy-contract.md, "Physical scheduling", "Timing
// model"). It mirrors the logical slot map from the insertions it is given, so it needs no
// access to the policy's state; it reads time only from the Link, so the same code drives the
// simulated clock and, later, real copies in the engine.
//
// Call order per token (the driver: simulator or engine):
//   begin_token();
//   for l in 0..L-1:
//     [A(l) runs]
//     begin_host(l)            -> mask of issued experts (physical demonstration mode only)
//     [H(l): policy part 2 of l, part 1 of l+1]
//     end_host(l, S, slots of S, demand copies of l, prefetch copies of l+1)
//     wait_for_layer(l, slots of S)   -> stall before M(l)
//     [M(l) runs]
//   [head runs]
//   end_token()                -> this token's accounting
// Nothing allocates per token after warm-up.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "link/link.hpp"
#include "policy/router.hpp"  // policy::Copy (a plain struct; no policy code is called)

namespace steermoe::schedule {

// When a pending prefetch is copied (physical only: routing never sees it).
enum class PrefetchPacing : uint8_t {
  // Pending prefetches go out in arrival order at layer boundaries, up to max_inflight (the
  // policy contract's rule; the paper's engine).
  kFifo,
  // A prefetch still pending when H of its layer shows its expert was not selected is deferred:
  // copied only when no other prefetch waits (or at once when a later selection needs it). On a
  // bandwidth-bound link a FIFO queue makes every later copy wait behind it.
  kDefer,
  // Such a prefetch is copied only when a later selection needs it (never in the background).
  kDemand,
};

// When pending prefetches may be enqueued (physical only: routing never sees it).
enum class PrefetchIssue : uint8_t {
  // At layer boundaries only (end of H), up to max_inflight: the policy contract's timing model.
  kBoundary,
  // Also just before each MoE (wait_for_layer): after a stall the moment the awaited copy has
  // completed, else at once. A copy that completes during a stall frees an in-flight place the
  // boundary rule would leave empty until the next layer's H ends; with it the link stays busy at
  // the same max_inflight (a completed read wakes the scheduler, where the scheduler waits).
  kEarly,
};

// When M(l) may start (physical only: routing never sees it, and the driver sums the experts'
// outputs in the order of S whatever the split, so the output does not change either).
enum class MoeWait : uint8_t {
  // After every copy into the slots of S has completed: the policy contract's timing model.
  kAll,
  // At once on the experts of S whose copies have completed, then on the others in groups as
  // their copies complete (each wait before a group as in kAll). On a bandwidth-bound link a
  // layer's missing expert is read while its resident ones compute, instead of after.
  kReady,
};

struct SchedulerConfig {
  int layers = 0;            // L: MoE layers
  int experts = 0;           // E: experts per layer
  int slots = 0;             // C: cache slots per layer
  int max_inflight = 2;      // enqueued, unfinished prefetches allowed at a layer boundary (>= 1)
  int64_t expert_bytes = 0;  // bytes of one expert copy
  PrefetchPacing pacing = PrefetchPacing::kFifo;
  PrefetchIssue issue = PrefetchIssue::kBoundary;
};

// What kind of copy last wrote a slot (used to attribute stalls).
enum class CopyKind : uint8_t { kNone, kWarm, kDemand, kPrefetch, kRestore, kBlock };

// Accounting of one decode token. Prefetch classification (exclusive; policy contract "Timing
// model"): a prefetch emitted for layer l of this token is `in_time` if its expert is in S and
// its copy completed by the end of H(l), `late` if its expert is in S and its copy had not
// completed (or not even been enqueued) by then, `unused` if its expert is not in S.
struct TokenStats {
  double start = 0;               // link clock at begin_token (start of the first A)
  double latency = 0;             // end_token - begin_token
  int32_t demand = 0;             // demand copies enqueued
  int32_t prefetch_emitted = 0;   // logical prefetch insertions (part 1) of this token
  int32_t prefetch_enqueued = 0;  // prefetch copies enqueued during this token (any origin)
  int32_t prefetch_forced = 0;    // of those, pending ones enqueued early because S needs them
  int32_t prefetch_in_time = 0;
  int32_t prefetch_late = 0;
  int32_t prefetch_unused = 0;
  int32_t prefetch_dropped = 0;   // pending prefetches dropped as stale during this token
  int32_t prefetch_deferred = 0;  // pending prefetches found unused at their layer and deferred
  double stall = 0;               // waits before M(l), all layers
  double stall_on_demand = 0;     // ... of which waiting on demand copies
  double stall_on_prefetch = 0;   // ... on prefetch copies (late prefetches)
  double stall_on_other = 0;      // ... on warm-up copies still in flight
  double host = 0;                // H(l) time, all layers
  int64_t bytes = 0;              // bytes enqueued during this token
  double link_busy = 0;           // link seconds with a copy in flight (Link::busy_seconds)
  int32_t copies() const { return demand + prefetch_enqueued; }
};

// Totals over every token since construction (or reset_totals), plus per-layer breakdowns.
struct RunTotals {
  int64_t tokens = 0;
  double latency = 0;  // sum of token latencies (link clock)
  int64_t requests = 0;
  int64_t demand = 0;
  int64_t prefetch_emitted = 0;
  int64_t prefetch_enqueued = 0;
  int64_t prefetch_forced = 0;
  int64_t prefetch_in_time = 0;
  int64_t prefetch_late = 0;
  int64_t prefetch_unused = 0;
  int64_t prefetch_dropped = 0;        // dropped as stale (slot reassigned before enqueue)
  int64_t prefetch_dropped_reset = 0;  // still pending when a new request reset the cache
  int64_t prefetch_deferred = 0;       // deferred (pacing defer / demand)
  double stall = 0, stall_on_demand = 0, stall_on_prefetch = 0, stall_on_other = 0;
  double host = 0;
  int64_t bytes = 0;
  double link_busy = 0;
  // Prompt time: warm-up copies at request start (kept out of the decode figures above).
  int64_t warm_copies = 0;
  int64_t warm_bytes = 0;
  // Speculative decoding's rollback: slots copied again after the policy took its caches back.
  int64_t restore_copies = 0;
  // Speculative decoding's verification blocks: experts of a block's set copied into a slot.
  int64_t block_copies = 0;
  double warm_seconds = 0;
  // Per layer [L].
  std::vector<int64_t> layer_demand, layer_in_time, layer_late, layer_unused;
  std::vector<double> layer_stall, layer_host;
};

class TransferScheduler {
 public:
  // `link` must outlive the scheduler; the scheduler is its only user.
  TransferScheduler(const SchedulerConfig& config, link::Link& link);

  // New request. `slot_experts` [L * C], layer-major: the logical expert of every slot after the
  // policy's reset (the warm set; -1 = empty). Pending prefetches are dropped; every slot whose
  // physical content differs is copied, and the call returns once all copies completed (prompt
  // time, counted in warm_* only). Returns the seconds it took.
  double begin_request(std::span<const int32_t> slot_experts);

  void begin_token();
  // Speculative decoding's rollback (between tokens): the policy took its logical caches back;
  // `slot_experts` [L * C] as for begin_request. Every slot whose logical expert changed is
  // reassigned (a pending prefetch into it dropped) and, where its physical content differs,
  // copied again without waiting: a later wait_for_layer waits for it as for a demand copy.
  void restore(std::span<const int32_t> slot_experts);

  // Speculative decoding's verification blocks (inside a token, between layers; no policy, no
  // prefetch): drop_pending drops every prefetch not yet copied (a block has no layer boundary
  // to send them at); place puts `expert` into `slot` of `layer` (the slot's logical expert from
  // now on) and copies it when the slot's latest copy holds another expert, as a demand copy
  // that a later wait_for_layer waits for. Returns whether it copied.
  void drop_pending();
  bool place(int layer, int slot, int expert);

  // Start of H(layer). Returns the [E] mask of experts of `layer` whose latest copy into some
  // slot has been enqueued (what routing sees in the `physical` demonstration mode). The span
  // stays valid and unchanged until end_host.
  std::span<const uint8_t> begin_host(int layer);

  // End of H(layer): `selected` = S and `selected_slot` its slots; `demand` = part 2
  // insertions of `layer`; `next_prefetch` = part 1 insertions of layer+1 (empty for the last
  // layer). Enqueues in the order of the timing model and runs the layer boundary.
  void end_host(int layer, std::span<const int32_t> selected,
                std::span<const int32_t> selected_slot, std::span<const policy::Copy> demand,
                std::span<const policy::Copy> next_prefetch);

  // Waits until the latest copy into every slot of S has completed (before M(layer)); returns
  // the stall in seconds. With PrefetchIssue::kEarly it then enqueues pending prefetches up to
  // max_inflight (after the wait, so that they never share the link with the awaited copies).
  double wait_for_layer(int layer, std::span<const int32_t> selected_slot);

  // Ends the token (after the head) and returns its accounting.
  const TokenStats& end_token();

  const TokenStats& token() const { return token_; }
  const RunTotals& totals() const { return totals_; }
  void reset_totals();
  const SchedulerConfig& config() const { return config_; }

  // Introspection (tests, invariants).
  int pending_count() const { return pending_count_; }
  int unfinished_prefetches();  // enqueued prefetch copies not yet complete
  link::Ticket slot_ticket(int layer, int slot) const { return ticket_[index(layer, slot)]; }
  int physical_expert(int layer, int slot) const { return physical_expert_[index(layer, slot)]; }
  int logical_expert(int layer, int slot) const { return logical_expert_[index(layer, slot)]; }
  bool slot_pending(int layer, int slot) const { return pending_[index(layer, slot)].live; }

 private:
  // One pending prefetch; at most one per slot (a newer insertion into the slot makes the
  // older one stale, so it is dropped at once: the outcome the spec's drop-at-enqueue gives).
  // It is on one of two lists, each in arrival order: waiting (to go out at the next layer
  // boundary) or deferred (found unused at its layer; pacing defer / demand).
  enum List : uint8_t { kWaiting = 0, kDeferred = 1 };
  struct PendingNode {
    bool live = false;
    uint8_t list = kWaiting;
    int32_t prev = -1, next = -1;  // doubly linked list in arrival order, by slot index
    int64_t sequence = 0;          // arrival order
  };
  // A prefetch emitted for a layer of the current token, kept until its layer's H ends.
  struct PrefetchRecord {
    int32_t slot = 0;
    uint64_t generation = 0;  // the insertion's generation in its slot
  };

  int index(int layer, int slot) const { return layer * config_.slots + slot; }
  void reassign(int slot_index, int expert);  // a logical insertion into a slot
  void pending_append(int slot_index, List list);
  void pending_remove(int slot_index);
  void defer_unused(int layer);
  void enqueue_copy(int slot_index, CopyKind kind);
  void pump_pending();
  void set_physical(int slot_index, int expert);

  SchedulerConfig config_;
  link::Link* link_;
  // Per slot [L * C].
  std::vector<int32_t> logical_expert_;
  std::vector<uint64_t> generation_;
  std::vector<int32_t> physical_expert_;  // expert of the latest enqueued copy (-1 = none)
  std::vector<link::Ticket> ticket_;      // ticket of the latest enqueued copy
  std::vector<CopyKind> kind_;
  std::vector<PendingNode> pending_;
  // Per layer and expert [L * E]: slots whose latest enqueued copy holds the expert.
  std::vector<uint16_t> issued_count_;
  std::vector<uint8_t> issued_mask_;
  // Pending list.
  int32_t pending_head_[2] = {-1, -1}, pending_tail_[2] = {-1, -1};  // by List
  int pending_count_ = 0;                                            // both lists
  int64_t pending_sequence_ = 0;
  uint64_t next_generation_ = 0;
  // Tickets of enqueued prefetch copies not known to be complete (FIFO: ascending). A ring that
  // grows only at new peaks.
  std::vector<link::Ticket> inflight_;
  size_t inflight_head_ = 0, inflight_size_ = 0;
  // Prefetch records of the current token [L][E] and their counts [L].
  std::vector<PrefetchRecord> records_;
  std::vector<int32_t> record_count_;
  // Scratch.
  std::vector<uint8_t> selected_flag_;  // [C]
  std::vector<int32_t> scratch_;        // [C]: slot indices / tickets to sort
  std::vector<link::Ticket> wait_tickets_;
  double host_begin_ = 0;
  double link_busy_at_start_ = 0;  // the link's busy seconds at begin_token
  int host_layer_ = -1;
  TokenStats token_;
  RunTotals totals_;
};

}  // namespace steermoe::schedule
