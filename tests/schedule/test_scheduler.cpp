// Hand-computed schedules on tiny cases. Every copy moves 1000 bytes over a 1 MB/s link with no
// latency, so each copy takes exactly 1 ms; A(l) = 0.1 ms, H(l) = 0.02 ms, M(l) = 0.2 ms and the
// head 0.1 ms unless a case says otherwise. Times in the comments are in ms.
#include <gtest/gtest.h>

#include <vector>

#include "common/error.hpp"
#include "link/simulated_link.hpp"
#include "schedule/scheduler.hpp"

namespace steermoe::schedule {
namespace {

using policy::Copy;
constexpr double kMs = 1e-3;
constexpr double kEps = 1e-12;

struct LayerStep {
  std::vector<int32_t> selected, slots;
  std::vector<Copy> demand, next_prefetch;
  double moe_ms = 0.2;
};

class Harness {
 public:
  Harness(int layers, int experts, int slots, int max_inflight,
          PrefetchIssue issue = PrefetchIssue::kBoundary)
      : link_({.bandwidth_bytes_per_s = 1e6, .latency_s = 0}),
        scheduler_({.layers = layers,
                    .experts = experts,
                    .slots = slots,
                    .max_inflight = max_inflight,
                    .expert_bytes = 1000,
                    .issue = issue},
                   link_) {
    link_.enable_log(true);
  }

  // Request start with slot i of every layer holding expert i.
  double warm_identity() {
    const auto& c = scheduler_.config();
    std::vector<int32_t> slot_experts;
    for (int l = 0; l < c.layers; ++l)
      for (int s = 0; s < c.slots; ++s) slot_experts.push_back(s);
    return scheduler_.begin_request(slot_experts);
  }
  void attention() { link_.advance(0.1 * kMs); }
  std::vector<uint8_t> host_begin(int layer) {
    auto mask = scheduler_.begin_host(layer);
    link_.advance(0.02 * kMs);
    return {mask.begin(), mask.end()};
  }
  double host_end_and_run(int layer, const LayerStep& s) {
    scheduler_.end_host(layer, s.selected, s.slots, s.demand, s.next_prefetch);
    const double stall = scheduler_.wait_for_layer(layer, s.slots);
    link_.advance(s.moe_ms * kMs);
    return stall;
  }
  double layer(int l, const LayerStep& s) {
    attention();
    host_begin(l);
    return host_end_and_run(l, s);
  }
  const TokenStats& head_and_end() {
    link_.advance(0.1 * kMs);
    return scheduler_.end_token();
  }

  link::SimulatedLink link_;
  TransferScheduler scheduler_;
};

TEST(Scheduler, WarmUpCopiesEverySlotOnceAndCountsAsPromptTime) {
  Harness h(2, 4, 2, 2);
  EXPECT_NEAR(h.warm_identity(), 4 * kMs, kEps);  // 4 slots, 1 ms each, back to back
  EXPECT_EQ(h.scheduler_.totals().warm_copies, 4);
  EXPECT_EQ(h.scheduler_.totals().warm_bytes, 4000);
  EXPECT_EQ(h.scheduler_.totals().bytes, 0);  // decode figures untouched
  EXPECT_EQ(h.scheduler_.physical_expert(1, 1), 1);
  EXPECT_EQ(h.link_.completed(), 4);
}

TEST(Scheduler, DemandCopyIsEnqueuedAtTheEndOfHostAndStallsOnlyItsLayer) {
  Harness h(2, 4, 2, 2);
  h.warm_identity();  // now = 4
  h.scheduler_.begin_token();
  // Layer 0: S = {0, 2}; expert 2 is demand-loaded into slot 1 (evicting 1). H ends at 4.12,
  // the copy (ticket 5) runs 4.12-5.12, M(0) waits 1 ms and runs 5.12-5.32.
  const double stall0 = h.layer(0, {.selected = {0, 2}, .slots = {0, 1}, .demand = {{2, 1}}});
  EXPECT_NEAR(stall0, 1.0 * kMs, kEps);
  ASSERT_EQ(h.link_.log().size(), 5u);
  EXPECT_EQ(h.link_.log()[4].ticket, 5);
  EXPECT_EQ(h.link_.log()[4].copy.expert, 2);
  EXPECT_EQ(h.link_.log()[4].copy.slot, 1);
  EXPECT_NEAR(h.link_.log()[4].enqueued, 4.12 * kMs, kEps);
  EXPECT_NEAR(h.link_.log()[4].end, 5.12 * kMs, kEps);
  EXPECT_EQ(h.scheduler_.slot_ticket(0, 1), 5);
  EXPECT_EQ(h.scheduler_.physical_expert(0, 1), 2);
  // Layer 1: everything resident, no stall: 5.32 + 0.1 + 0.02 + 0.2 = 5.64; head to 5.74.
  EXPECT_EQ(h.layer(1, {.selected = {0, 1}, .slots = {0, 1}}), 0.0);
  const TokenStats& t = h.head_and_end();
  EXPECT_NEAR(t.latency, 1.74 * kMs, kEps);
  EXPECT_EQ(t.demand, 1);
  EXPECT_EQ(t.copies(), 1);
  EXPECT_NEAR(t.stall, 1.0 * kMs, kEps);
  EXPECT_NEAR(t.stall_on_demand, 1.0 * kMs, kEps);
  EXPECT_NEAR(t.host, 0.04 * kMs, kEps);
  EXPECT_EQ(t.bytes, 1000);
  EXPECT_NEAR(h.scheduler_.totals().layer_stall[0], 1.0 * kMs, kEps);
  EXPECT_EQ(h.scheduler_.totals().layer_stall[1], 0.0);
}

// Layer 0 of the prefetch cases: S = {0, 1} resident; part 1 for layer 1 inserts 4 -> slot 2,
// 5 -> slot 3, 6 -> slot 0 (three prefetches). Warm-up leaves now = 8 (8 slots).
LayerStep prefetching_layer0(double moe_ms) {
  return {.selected = {0, 1},
          .slots = {0, 1},
          .next_prefetch = {{4, 2}, {5, 3}, {6, 0}},
          .moe_ms = moe_ms};
}

TEST(Scheduler, PrefetchesBeyondMaxInflightWaitInThePendingListAndAreForcedWhenNeeded) {
  Harness h(2, 8, 4, /*max_inflight=*/2);
  h.warm_identity();
  h.scheduler_.begin_token();
  // H(0) ends at 8.12: tickets 9 (4@2, 8.12-9.12) and 10 (5@3, 9.12-10.12) go out, 6 waits.
  EXPECT_EQ(h.layer(0, prefetching_layer0(0.2)), 0.0);
  EXPECT_EQ(h.scheduler_.pending_count(), 1);
  EXPECT_TRUE(h.scheduler_.slot_pending(1, 0));
  EXPECT_EQ(h.link_.last_ticket(), 10);
  // A(1) 8.32-8.42. Routing in H(1) would see the issued copies: 0 (slot 0's old content, as
  // 6 is not issued yet), 1, 4, 5.
  h.attention();
  const std::vector<uint8_t> issued = h.host_begin(1);
  EXPECT_EQ(issued, (std::vector<uint8_t>{1, 1, 0, 0, 1, 1, 0, 0}));
  // H(1) ends at 8.44 with S = {4, 6}: 6 is forced out at once (ticket 11, 10.12-11.12).
  // M(1) waits on tickets 9 (to 9.12) and 11 (to 11.12): 0.68 + 2.0 ms, both prefetches.
  const double stall = h.host_end_and_run(1, {.selected = {4, 6}, .slots = {2, 0}, .moe_ms = 0.2});
  EXPECT_NEAR(stall, 2.68 * kMs, kEps);
  EXPECT_NEAR(h.link_.completion_time(11), 11.12 * kMs, kEps);
  const TokenStats& t = h.head_and_end();  // 11.12 + 0.2 + 0.1 = 11.42, started at 8
  EXPECT_NEAR(t.latency, 3.42 * kMs, kEps);
  EXPECT_EQ(t.prefetch_emitted, 3);
  EXPECT_EQ(t.prefetch_enqueued, 3);
  EXPECT_EQ(t.prefetch_forced, 1);
  EXPECT_EQ(t.prefetch_in_time, 0);
  EXPECT_EQ(t.prefetch_late, 2);
  EXPECT_EQ(t.prefetch_unused, 1);  // 5 was not selected
  EXPECT_EQ(t.demand, 0);
  EXPECT_NEAR(t.stall_on_prefetch, 2.68 * kMs, kEps);
  EXPECT_EQ(t.stall_on_demand, 0.0);
  // Ticket order: 4, 5, 6, all into layer 1.
  const auto& log = h.link_.log();
  ASSERT_EQ(log.size(), 11u);
  EXPECT_EQ(log[8].copy.expert, 4);
  EXPECT_EQ(log[9].copy.expert, 5);
  EXPECT_EQ(log[10].copy.expert, 6);
  EXPECT_EQ(log[10].copy.slot, 0);
}

TEST(Scheduler, PrefetchesThatCompleteBeforeTheirLayerAreInTime) {
  // Same token with M(0) = 5 ms and max_inflight 4: all three go out at 8.12 and finish at
  // 9.12, 10.12, 11.12, before H(1) ends at 13.24.
  Harness h(2, 8, 4, /*max_inflight=*/4);
  h.warm_identity();
  h.scheduler_.begin_token();
  h.layer(0, prefetching_layer0(5.0));
  EXPECT_EQ(h.scheduler_.pending_count(), 0);
  EXPECT_EQ(h.layer(1, {.selected = {4, 6}, .slots = {2, 0}}), 0.0);
  const TokenStats& t = h.head_and_end();
  EXPECT_NEAR(t.latency, 5.54 * kMs, kEps);
  EXPECT_EQ(t.prefetch_in_time, 2);
  EXPECT_EQ(t.prefetch_late, 0);
  EXPECT_EQ(t.prefetch_unused, 1);
  EXPECT_EQ(t.stall, 0.0);
}

TEST(Scheduler, MaxInflightAloneChangesLatencyNotTheCopies) {
  // The same token with M(0) = 5 ms but max_inflight 2: 6 stays pending until H(1) ends (13.24;
  // no boundary in between), is forced out and completes at 14.24: one late prefetch, 1 ms stall.
  Harness h(2, 8, 4, /*max_inflight=*/2);
  h.warm_identity();
  h.scheduler_.begin_token();
  h.layer(0, prefetching_layer0(5.0));
  EXPECT_EQ(h.scheduler_.pending_count(), 1);
  EXPECT_NEAR(h.layer(1, {.selected = {4, 6}, .slots = {2, 0}}), 1.0 * kMs, kEps);
  const TokenStats& t = h.head_and_end();
  EXPECT_NEAR(t.latency, 6.54 * kMs, kEps);
  EXPECT_EQ(t.prefetch_in_time, 1);
  EXPECT_EQ(t.prefetch_late, 1);
  EXPECT_EQ(t.prefetch_unused, 1);
  EXPECT_EQ(t.prefetch_enqueued, 3);
}

// A stall on a late prefetch frees its in-flight place: with PrefetchIssue::kEarly the next
// pending prefetch goes out the moment the awaited copy completes instead of at the next
// layer's end of H. 3 layers, max_inflight 1; warm-up 12 copies, so the token starts at 12.
TEST(Scheduler, EarlyIssueSendsAPendingPrefetchWhenAStallEnds) {
  for (const PrefetchIssue issue : {PrefetchIssue::kBoundary, PrefetchIssue::kEarly}) {
    const bool early = issue == PrefetchIssue::kEarly;
    SCOPED_TRACE(early ? "early" : "boundary");
    Harness h(3, 8, 4, /*max_inflight=*/1, issue);
    h.warm_identity();
    h.scheduler_.begin_token();
    // H(0) ends at 12.12: 4@2 of layer 1 goes out (ticket 13, 12.12-13.12).
    EXPECT_EQ(h.layer(0, {.selected = {0, 1}, .slots = {0, 1}, .next_prefetch = {{4, 2}}}), 0.0);
    // H(1) ends at 12.44 with S = {4, 1}: 5@2 and 6@3 of layer 2 wait (one in flight); M(1)
    // waits for ticket 13 until 13.12. Early: 5 goes out then (ticket 14, 13.12-14.12).
    h.attention();
    h.host_begin(1);
    const double stall1 = h.host_end_and_run(
        1, {.selected = {4, 1}, .slots = {2, 1}, .next_prefetch = {{5, 2}, {6, 3}}});
    EXPECT_NEAR(stall1, 0.68 * kMs, kEps);
    EXPECT_EQ(h.scheduler_.pending_count(), early ? 1 : 2);
    // H(2) ends at 13.44 with S = {5, 6}: what still waits is forced out. Boundary: 5 and 6 at
    // 13.44-14.44-15.44; early: 6 behind 5, 14.12-15.12.
    const double stall2 = h.layer(2, {.selected = {5, 6}, .slots = {2, 3}});
    EXPECT_NEAR(stall2, (early ? 1.68 : 2.0) * kMs, kEps);
    const TokenStats& t = h.head_and_end();
    EXPECT_NEAR(t.latency, (early ? 3.42 : 3.74) * kMs, kEps);
    EXPECT_EQ(t.prefetch_enqueued, 3);  // the same copies either way
    EXPECT_EQ(t.prefetch_forced, early ? 1 : 2);
  }
}

TEST(Scheduler, StalePendingPrefetchIsDroppedAndDemandWaitsBehindAtMostMaxInflight) {
  Harness h(2, 8, 4, /*max_inflight=*/2);
  h.warm_identity();
  h.scheduler_.begin_token();
  h.layer(0, prefetching_layer0(0.2));  // tickets 9 (4@2), 10 (5@3); 6@0 pending
  // H(1), ending at 8.44: S = {1, 7}; 7 is demand-loaded into slot 0, which evicts the pending
  // prefetch of 6: it is dropped, never copied. The demand copy (ticket 11) queues behind the
  // two prefetches in flight (max_inflight = 2) and runs 10.12-11.12: a 2.68 ms stall.
  const double stall = h.layer(1, {.selected = {1, 7}, .slots = {1, 0}, .demand = {{7, 0}}});
  EXPECT_NEAR(stall, 2.68 * kMs, kEps);
  const auto& log = h.link_.log();
  ASSERT_EQ(log.size(), 11u);
  EXPECT_EQ(log[10].copy.expert, 7);
  EXPECT_NEAR(log[10].start, 10.12 * kMs, kEps);
  for (const auto& copy : log) EXPECT_NE(copy.copy.expert, 6) << "stale prefetch was copied";
  EXPECT_EQ(h.scheduler_.pending_count(), 0);
  EXPECT_EQ(h.scheduler_.physical_expert(1, 0), 7);
  const TokenStats& t = h.head_and_end();
  EXPECT_EQ(t.prefetch_dropped, 1);
  EXPECT_EQ(t.prefetch_emitted, 3);
  EXPECT_EQ(t.prefetch_enqueued, 2);
  EXPECT_EQ(t.prefetch_unused, 3);  // 4 and 5 not selected, 6 evicted before its layer
  EXPECT_EQ(t.demand, 1);
  EXPECT_NEAR(t.stall_on_demand, 2.68 * kMs, kEps);
  const RunTotals& r = h.scheduler_.totals();
  EXPECT_EQ(r.prefetch_emitted, r.prefetch_enqueued + r.prefetch_dropped);
}

TEST(Scheduler, NewRequestDropsPendingPrefetchesAndCopiesOnlyChangedSlots) {
  Harness h(2, 8, 4, 2);
  h.warm_identity();
  h.scheduler_.begin_token();
  h.layer(0, prefetching_layer0(0.2));  // 4@2, 5@3 enqueued; 6@0 pending
  h.layer(1, {.selected = {4, 5}, .slots = {2, 3}});
  h.head_and_end();
  EXPECT_EQ(h.scheduler_.pending_count(), 1);
  // Back to the identity warm set: slots 2 and 3 of layer 1 hold 4 and 5 physically, slot 0
  // still holds 0 (6 never went out): two copies.
  const int64_t before = h.link_.last_ticket();
  h.warm_identity();
  EXPECT_EQ(h.link_.last_ticket(), before + 2);
  EXPECT_EQ(h.scheduler_.totals().prefetch_dropped_reset, 1);
  EXPECT_EQ(h.scheduler_.totals().warm_copies, 8 + 2);
  EXPECT_EQ(h.scheduler_.pending_count(), 0);
  EXPECT_EQ(h.scheduler_.physical_expert(1, 2), 2);
}

TEST(Scheduler, PendingPrefetchCarriesOverToTheNextTokenInArrivalOrder) {
  // max_inflight 1: of 4@2, 5@3, 6@0 only 4 goes out at the end of H(0) (8.12-9.12). H(1) of
  // this token (S = {1, 4}) ends at 8.44 with 4 unfinished: 5 and 6 stay pending. The next
  // token's first boundary (end of its H(0), 9.54) sends 5, the oldest (9.54-10.54); its H(1)
  // (ending 9.86) selects 6, which is forced out (10.54-11.54).
  Harness h(2, 8, 4, /*max_inflight=*/1);
  h.warm_identity();
  h.scheduler_.begin_token();
  h.layer(0, prefetching_layer0(0.2));
  EXPECT_EQ(h.link_.last_ticket(), 9);
  h.layer(1, {.selected = {1, 4}, .slots = {1, 2}});  // stalls on 4 until 9.12
  // End of H(1) happened before 4 finished: no room, both still pending.
  EXPECT_EQ(h.scheduler_.pending_count(), 2);
  h.head_and_end();
  h.scheduler_.begin_token();
  h.layer(0, {.selected = {0, 1}, .slots = {0, 1}});
  EXPECT_EQ(h.link_.last_ticket(), 10);
  EXPECT_EQ(h.link_.log()[9].copy.expert, 5);  // oldest first
  EXPECT_EQ(h.scheduler_.pending_count(), 1);
  // Layer 1 of the second token selects 6: forced out now.
  h.layer(1, {.selected = {5, 6}, .slots = {3, 0}});
  EXPECT_EQ(h.link_.log()[10].copy.expert, 6);
  const TokenStats& t = h.head_and_end();
  EXPECT_EQ(t.prefetch_emitted, 0);  // no new prefetch in this token
  EXPECT_EQ(t.prefetch_enqueued, 2);
  EXPECT_EQ(t.prefetch_forced, 1);
  EXPECT_NEAR(t.stall_on_prefetch, 1.68 * kMs, kEps);
}

TEST(Scheduler, RejectsBadConfiguration) {
  link::SimulatedLink link({.bandwidth_bytes_per_s = 1e9, .latency_s = 0});
  EXPECT_THROW(TransferScheduler({.layers = 2, .experts = 4, .slots = 5, .max_inflight = 2}, link),
               Error);
  EXPECT_THROW(TransferScheduler({.layers = 2, .experts = 4, .slots = 2, .max_inflight = 0}, link),
               Error);
  EXPECT_THROW(TransferScheduler({.layers = 0, .experts = 4, .slots = 2}, link), Error);
}

}  // namespace
}  // namespace steermoe::schedule
