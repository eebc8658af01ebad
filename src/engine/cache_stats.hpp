// What the expert cache did, as a value: logical decisions (every routed token) and physical
// copies and stalls (links that move experts). Values add (`+=`) and subtract (`-`), so a
// caller takes a per-request or per-phase figure as the difference of two readings instead of
// resetting anybody's counters; ExpertCache hands out totals, the last token and the current
// request.
#pragma once

#include <cstdint>

namespace steermoe::engine {

struct CacheStats {
  // Logical: every token the policy routed (prompt included), on every link.
  int64_t routed_tokens = 0;     // tokens routed
  int64_t layer_steps = 0;       // (token, MoE layer) steps
  int64_t replaced = 0;          // router top-K experts replaced by the policy (|S \ exact|)
  int64_t logical_demand = 0;    // demand insertions into the logical cache
  int64_t logical_prefetch = 0;  // prefetch insertions (part 1)
  int64_t block_positions = 0;   // speculative decoding: positions verified in blocks
  int64_t block_copies = 0;      // ... experts the blocks needed outside the pool
  int64_t restore_copies = 0;    // --spec-select rollback: slots given back their expert

  // Physical: links that move experts (not resident), decode tokens only; warm-up copies at
  // request start are prompt time and counted apart.
  bool physical = false;         // a link moves experts (a scheduler runs)
  int64_t tokens = 0;            // tokens timed by the scheduler
  double latency_s = 0;          // sum of token latencies on the link clock (simulated under sim:)
  int64_t demand = 0;            // demand copies
  int64_t prefetch_emitted = 0;  // prefetch insertions handed to the scheduler
  int64_t prefetch = 0;          // prefetch copies enqueued
  // The emitted prefetches, split three ways (exclusive; they sum to prefetch_emitted, copied
  // or not: schedule::TokenStats):
  int64_t prefetch_in_time = 0;  // ... completed before their layer's H ended, expert used
  int64_t prefetch_late = 0;     // ... used, not complete (or not copied) by then
  int64_t prefetch_unused = 0;   // ... expert not selected
  int64_t prefetch_dropped = 0;  // pending prefetches dropped as stale before being copied
  double stall_s = 0;            // waits before M(l)
  double stall_demand_s = 0;     // ... on demand copies
  double stall_prefetch_s = 0;   // ... on late prefetches
  double stall_other_s = 0;      // ... on warm-up copies still in flight
  double host_s = 0;             // policy time H(l)
  double attention_s = 0;        // A(l): from a layer's start to its H(l), all MoE layers
  double moe_s = 0;              // M(l): from the end of the wait to the layer's end
  int64_t bytes = 0;             // bytes copied (decode)
  double link_busy_s = 0;        // link time with a copy in flight (0: the link does not say)
  int64_t warm_copies = 0;       // warm-up copies at request start
  int64_t restore_copied = 0;    // --spec-select rollback: slots copied again after a rejection
  int64_t block_copied = 0;      // verification blocks: experts copied into a block's slots
  int64_t block_prefetched = 0;  // ... of which copied early, from the previous layer's pre-gate
  int64_t warm_bytes = 0;
  double warm_s = 0;

  // Copies an offloading engine makes: the link's when it moves experts, else the logical
  // insertions (what it would copy).
  int64_t demand_copies() const { return physical ? demand : logical_demand; }
  int64_t prefetch_copies() const { return physical ? prefetch : logical_prefetch; }

  CacheStats& operator+=(const CacheStats& o);
  CacheStats& operator-=(const CacheStats& o);
  friend CacheStats operator+(CacheStats a, const CacheStats& b) { return a += b; }
  friend CacheStats operator-(CacheStats a, const CacheStats& b) { return a -= b; }
};

}  // namespace steermoe::engine
