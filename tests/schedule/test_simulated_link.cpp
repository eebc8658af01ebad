// The simulated clock: one FIFO copy stream, copies take latency + bytes / bandwidth.
#include <gtest/gtest.h>

#include "common/error.hpp"
#include "link/simulated_link.hpp"

namespace steermoe::link {
namespace {

constexpr double kEps = 1e-12;

TEST(SimulatedLink, CopiesRunOneAfterAnotherInEnqueueOrder) {
  // 1000 bytes at 1 MB/s = 1 ms, plus 0.5 ms latency per copy.
  SimulatedLink link({.bandwidth_bytes_per_s = 1e6, .latency_s = 0.5e-3});
  link.enable_log(true);
  EXPECT_EQ(link.enqueue({.layer = 0, .slot = 0, .expert = 3, .bytes = 1000}), 1);
  EXPECT_EQ(link.enqueue({.layer = 0, .slot = 1, .expert = 4, .bytes = 2000}), 2);
  EXPECT_NEAR(link.completion_time(1), 1.5e-3, kEps);
  EXPECT_NEAR(link.completion_time(2), 4.0e-3, kEps);  // starts when copy 1 ends
  EXPECT_EQ(link.completed(), 0);
  link.advance(1.5e-3);
  EXPECT_EQ(link.completed(), 1);
  EXPECT_TRUE(link.is_complete(1));
  EXPECT_FALSE(link.is_complete(2));
  // The link is idle after 4 ms; a copy enqueued at 10 ms starts at once.
  link.advance(8.5e-3);
  EXPECT_EQ(link.completed(), 2);
  EXPECT_EQ(link.enqueue({.layer = 1, .slot = 0, .expert = 5, .bytes = 1000}), 3);
  EXPECT_NEAR(link.completion_time(3), 11.5e-3, kEps);
  ASSERT_EQ(link.log().size(), 3u);
  EXPECT_NEAR(link.log()[2].start, 10e-3, kEps);
  EXPECT_NEAR(link.log()[1].start, 1.5e-3, kEps);
  // Retired tickets still answer from the log.
  EXPECT_NEAR(link.completion_time(1), 1.5e-3, kEps);
  EXPECT_EQ(link.bytes_moved(), 4000);
  EXPECT_NEAR(link.busy_seconds(), 5.5e-3, kEps);
}

// A disk with a queue of reads (steermoe profile's disk profiles): copies in flight overlap their
// latency and share the bandwidth one transfer after another.
TEST(SimulatedLink, PipelinedCopiesOverlapTheirLatency) {
  SimulatedLink link({.bandwidth_bytes_per_s = 1e6, .latency_s = 0.5e-3, .pipelined = true});
  EXPECT_EQ(link.enqueue({.layer = 0, .slot = 0, .expert = 3, .bytes = 1000}), 1);
  EXPECT_EQ(link.enqueue({.layer = 0, .slot = 1, .expert = 4, .bytes = 2000}), 2);
  EXPECT_EQ(link.enqueue({.layer = 0, .slot = 2, .expert = 5, .bytes = 1000}), 3);
  EXPECT_NEAR(link.completion_time(1), 1.5e-3, kEps);  // alone: latency + transfer
  EXPECT_NEAR(link.completion_time(2), 3.5e-3, kEps);  // its transfer after copy 1's
  EXPECT_NEAR(link.completion_time(3), 4.5e-3, kEps);  // (serial: 1.5 + 2.5 + 1.5 = 5.5 ms)
  EXPECT_NEAR(link.busy_seconds(), 4.0e-3, kEps);      // transfers only
  // Idle again: a copy enqueued at 10 ms pays the latency once more.
  link.advance(10e-3);
  EXPECT_EQ(link.enqueue({.layer = 1, .slot = 0, .expert = 6, .bytes = 1000}), 4);
  EXPECT_NEAR(link.completion_time(4), 11.5e-3, kEps);
}

TEST(SimulatedLink, WaitAdvancesTheClockToTheCompletionOnlyIfNeeded) {
  SimulatedLink link({.bandwidth_bytes_per_s = 1e6, .latency_s = 0});
  const Ticket a = link.enqueue({.bytes = 1000});
  const Ticket b = link.enqueue({.bytes = 1000});
  link.wait(a);
  EXPECT_NEAR(link.now(), 1e-3, kEps);
  EXPECT_EQ(link.completed(), a);
  link.advance(5e-3);  // b finished at 2 ms, long ago
  link.wait(b);
  EXPECT_NEAR(link.now(), 6e-3, kEps);
  link.wait(kNoTicket);  // no copy: nothing to wait for
  EXPECT_NEAR(link.now(), 6e-3, kEps);
}

// Compute that shares the machine with the link: work advanced while a transfer runs takes
// 1 / (1 - slowdown) as long; before, between and after transfers it runs at full speed.
TEST(SimulatedLink, WorkRunsSlowerOnlyWhileATransferRuns) {
  SimulatedLink link({.bandwidth_bytes_per_s = 1e6,
                      .latency_s = 1e-3,
                      .pipelined = true,
                      .compute_slowdown = 0.5});
  // Transfers: [1, 3] ms (latency 1 ms first, then 2 ms of transfer) and [3, 4] ms.
  link.enqueue({.bytes = 2000});
  link.enqueue({.bytes = 1000});
  // 1 ms at full speed (the first latency), then 3 ms of busy link at half speed = 1.5 ms of
  // work, then 0.5 ms at full speed after the last transfer: 3 ms of work end at 4.5 ms.
  link.advance(3e-3);
  EXPECT_NEAR(link.now(), 4.5e-3, kEps);
  // Nothing in flight any more: plain addition.
  link.advance(1e-3);
  EXPECT_NEAR(link.now(), 5.5e-3, kEps);
  // Work that ends inside a transfer: from 5.5 ms, a 2 ms transfer starts at 6.5 ms (latency).
  link.enqueue({.bytes = 2000});
  link.advance(1.5e-3);  // 1 ms full speed, then 0.5 ms of work at half speed = 1 ms
  EXPECT_NEAR(link.now(), 7.5e-3, kEps);
  // Completion times do not move: the link is not slowed by the compute.
  EXPECT_NEAR(link.completion_time(3), 8.5e-3, kEps);
}

TEST(SimulatedLink, NoSlowdownIsPlainAdditionAndBadSlowdownsAreRefused) {
  SimulatedLink link({.bandwidth_bytes_per_s = 1e6, .latency_s = 0});
  link.enqueue({.bytes = 5000});
  link.advance(2e-3);
  EXPECT_NEAR(link.now(), 2e-3, kEps);
  for (const double bad : {-0.1, 1.0, 2.0}) {
    EXPECT_THROW(SimulatedLink({.bandwidth_bytes_per_s = 1e6, .compute_slowdown = bad}),
                 steermoe::Error)
        << bad;
  }
}

TEST(SimulatedLink, RingGrowsPastItsInitialCapacityWithoutLosingOrder) {
  SimulatedLink link({.bandwidth_bytes_per_s = 1e9, .latency_s = 1e-6});
  for (int i = 0; i < 1000; ++i) link.enqueue({.bytes = 1000});  // 2 us each
  link.advance(1.0005e-3);  // 500 copies done (the 501st ends at 1.002 ms)
  EXPECT_EQ(link.completed(), 500);
  for (int i = 0; i < 300; ++i) link.enqueue({.bytes = 1000});
  EXPECT_NEAR(link.completion_time(1300), 1300 * 2e-6, 1e-12);
  link.wait(1300);
  EXPECT_EQ(link.completed(), 1300);
  EXPECT_NEAR(link.now(), 2.6e-3, 1e-12);
}

// A disk that reads faster with several reads in flight: two channels, each at half the link's
// bandwidth; a copy goes to the channel that frees first.
TEST(SimulatedLink, ChannelsTransferCopiesAtOnceEachAtItsShare) {
  // 2 MB/s over 2 channels: 1000 bytes take 1 ms on a channel.
  SimulatedLink link({.bandwidth_bytes_per_s = 2e6, .latency_s = 0, .channels = 2});
  link.enable_log(true);
  EXPECT_EQ(link.channels(), 2);
  link.enqueue({.bytes = 1000});
  link.enqueue({.bytes = 1000});
  link.enqueue({.bytes = 1000});
  EXPECT_NEAR(link.completion_time(1), 1e-3, kEps);
  EXPECT_NEAR(link.completion_time(2), 1e-3, kEps);  // beside copy 1, not after it
  EXPECT_NEAR(link.completion_time(3), 2e-3, kEps);  // the first channel to free
  EXPECT_EQ(link.log()[1].channel, 1);
  EXPECT_EQ(link.log()[2].channel, 0);
  EXPECT_NEAR(link.busy_until(), 2e-3, kEps);
  EXPECT_NEAR(link.copy_seconds(1000), 1e-3, kEps);  // alone: bytes x channels / bandwidth
  // Back to back the link reaches its bandwidth: 8 more copies of 1000 bytes end 4 ms later.
  link.wait(3);
  for (int i = 0; i < 8; ++i) link.enqueue({.bytes = 1000});
  EXPECT_NEAR(link.completion_time(11), 6e-3, kEps);
  EXPECT_EQ(link.bytes_moved(), 11000);
  EXPECT_NEAR(link.busy_seconds(), 6e-3, kEps);  // the union: [0, 2] and [2, 6] ms
}

// Completions are reported in enqueue order (as the disk link reports its watermark): a short
// copy beside a long one counts as complete only when the long one ends.
TEST(SimulatedLink, ChannelsReportCompletionInEnqueueOrder) {
  SimulatedLink link(
      {.bandwidth_bytes_per_s = 2e6, .latency_s = 0.5e-3, .pipelined = true, .channels = 2});
  link.enable_log(true);
  link.enqueue({.bytes = 4000});  // channel 0: 0.5 ms latency + 4 ms
  link.enqueue({.bytes = 1000});  // channel 1: 0.5 ms latency + 1 ms
  EXPECT_NEAR(link.log()[1].transfer_end, 1.5e-3, kEps);
  EXPECT_NEAR(link.completion_time(2), 4.5e-3, kEps);
  link.advance(2e-3);
  EXPECT_EQ(link.completed(), 0);
  link.wait(2);
  EXPECT_NEAR(link.now(), 4.5e-3, kEps);
  EXPECT_EQ(link.completed(), 2);
  // Pipelined per channel: the next copy on channel 1 overlaps its latency with the previous
  // one's transfer. Enqueued at 4.5 ms, both channels idle: latency again.
  link.enqueue({.bytes = 1000});
  EXPECT_NEAR(link.completion_time(3), 6e-3, kEps);
}

// Overlapping transfers on two channels slow the compute once over their union, not once per
// transfer.
TEST(SimulatedLink, WorkRunsSlowerOverTheUnionOfOverlappingTransfers) {
  SimulatedLink link(
      {.bandwidth_bytes_per_s = 2e6, .latency_s = 0, .channels = 2, .compute_slowdown = 0.5});
  link.enqueue({.bytes = 2000});  // [0, 2] ms on channel 0
  link.advance(0.5e-3);           // at half speed: 1 ms
  EXPECT_NEAR(link.now(), 1e-3, kEps);
  link.enqueue({.bytes = 2000});  // [1, 3] ms on channel 1
  link.enqueue({.bytes = 1000});  // [2, 3] ms on channel 0
  // Busy [1, 3] ms: 2 ms at half speed = 1 ms of work, then 1 ms at full speed.
  link.advance(2e-3);
  EXPECT_NEAR(link.now(), 4e-3, kEps);
  // Two copies started together: busy [4, 6] once, then idle.
  link.enqueue({.bytes = 2000});
  link.enqueue({.bytes = 2000});
  link.advance(2e-3);  // 1 ms of work over [4, 6], 1 ms after
  EXPECT_NEAR(link.now(), 7e-3, kEps);
  // A short transfer inside a long one: busy [7, 11] ms, not up to the short one's end.
  link.enqueue({.bytes = 4000});  // [7, 11]
  link.enqueue({.bytes = 1000});  // [7, 8]
  link.advance(3e-3);             // 2 ms of work over [7, 11], 1 ms after
  EXPECT_NEAR(link.now(), 12e-3, kEps);
}

// The converse: compute that slows the link (a disk link's I/O thread waiting for a core the
// compute threads hold). Transfers progress at 1 - transfer_slowdown of their speed while the
// caller works, at full speed while it waits; latency is not slowed.
TEST(SimulatedLink, WorkSlowsTheTransfersItOverlaps) {
  SimulatedLink link({.bandwidth_bytes_per_s = 1e6, .latency_s = 0, .transfer_slowdown = 0.5});
  link.enable_log(true);
  link.enqueue({.bytes = 2000});  // 2 ms at full speed
  link.enqueue({.bytes = 1000});  // 1 ms after it
  EXPECT_NEAR(link.completion_time(1), 2e-3, kEps);
  // 1 ms of work: the first copy moves 0.5 ms of its 2, so it ends 1.5 ms after the work.
  link.advance(1e-3);
  EXPECT_NEAR(link.now(), 1e-3, kEps);  // the work itself is not slowed (compute_slowdown 0)
  EXPECT_NEAR(link.completion_time(1), 2.5e-3, kEps);
  EXPECT_NEAR(link.completion_time(2), 3.5e-3, kEps);
  EXPECT_NEAR(link.busy_until(), 3.5e-3, kEps);
  // 2 ms more of work: 1.5 ms left of copy 1 at half speed takes 3 ms, past the work's end at
  // 3 ms (1 ms of it done), so copy 1 ends at 3 + 0.5 = 3.5 ms, copy 2 at 4.5 ms.
  link.advance(2e-3);
  EXPECT_NEAR(link.now(), 3e-3, kEps);
  EXPECT_NEAR(link.completion_time(1), 3.5e-3, kEps);
  EXPECT_NEAR(link.completion_time(2), 4.5e-3, kEps);
  // Waiting is the caller idle: full speed.
  link.wait(2);
  EXPECT_NEAR(link.now(), 4.5e-3, kEps);
  ASSERT_EQ(link.log().size(), 2u);
  EXPECT_NEAR(link.log()[0].transfer_end, 3.5e-3, kEps);
  EXPECT_NEAR(link.log()[1].start, 3.5e-3, kEps);
  EXPECT_NEAR(link.log()[1].end, 4.5e-3, kEps);
  EXPECT_NEAR(link.busy_seconds(), 4.5e-3, kEps);
  EXPECT_NEAR(link.completion_time(1), 3.5e-3, kEps);  // retired: from the log
}

TEST(SimulatedLink, TransferSlowdownLeavesLatencyAndWorkAfterTheTransfersAlone) {
  // Pipelined: 1 ms of latency at full speed, then 1 ms of transfer at half speed while the
  // caller works until 2 ms: half of it done, the rest at full speed after the work.
  SimulatedLink link({.bandwidth_bytes_per_s = 1e6,
                      .latency_s = 1e-3,
                      .pipelined = true,
                      .transfer_slowdown = 0.5});
  link.enqueue({.bytes = 1000});
  link.advance(2e-3);
  EXPECT_NEAR(link.now(), 2e-3, kEps);
  EXPECT_NEAR(link.completion_time(1), 2.5e-3, kEps);
  // A copy enqueued after the work has nothing to slow it.
  link.wait(1);
  link.advance(1e-3);
  EXPECT_EQ(link.completed(), 1);
  link.enqueue({.bytes = 1000});
  EXPECT_NEAR(link.completion_time(2), 5.5e-3, kEps);
  for (const double bad : {-0.1, 1.0}) {
    EXPECT_THROW(SimulatedLink({.bandwidth_bytes_per_s = 1e6, .transfer_slowdown = bad}),
                 steermoe::Error)
        << bad;
  }
}

// Both ways at once: while the transfer runs, the work runs at half speed and the transfer too.
TEST(SimulatedLink, WorkAndTransfersSlowEachOther) {
  SimulatedLink link({.bandwidth_bytes_per_s = 1e6,
                      .latency_s = 0,
                      .compute_slowdown = 0.5,
                      .transfer_slowdown = 0.5});
  link.enqueue({.bytes = 2000});  // 2 ms alone
  link.advance(1e-3);             // 1 ms of work takes 2 ms beside it; it moves 1 ms of its 2
  EXPECT_NEAR(link.now(), 2e-3, kEps);
  EXPECT_NEAR(link.completion_time(1), 3e-3, kEps);
  // The transfer's last 1 ms at half speed takes 2 ms, in which 1 ms of the work runs; the
  // other 1 ms of work after it at full speed.
  link.advance(2e-3);
  EXPECT_NEAR(link.completion_time(1), 4e-3, kEps);
  EXPECT_NEAR(link.now(), 5e-3, kEps);
}

// The re-timing keeps the link's rules (channels, pipelined latency, FIFO completion): with a
// negligible slowdown, a long random run of copies, work and waits gives the fixed times.
TEST(SimulatedLink, ReTimingWithANegligibleSlowdownGivesTheFixedTimes) {
  for (const bool pipelined : {false, true}) {
    for (const int channels : {1, 3}) {
      for (const double compute : {0.0, 0.4}) {
        SimulatedLinkParams base{.bandwidth_bytes_per_s = 1e6,
                                 .latency_s = 0.7e-3,
                                 .pipelined = pipelined,
                                 .channels = channels,
                                 .compute_slowdown = compute};
        SimulatedLinkParams slowed = base;
        slowed.transfer_slowdown = 1e-12;
        SCOPED_TRACE(::testing::Message() << "pipelined " << pipelined << " channels " << channels
                                          << " compute_slowdown " << compute);
        SimulatedLink fixed(base), retimed(slowed);
        fixed.enable_log(true);
        retimed.enable_log(true);
        uint64_t state = 12345;
        const auto next = [&] {
          state = state * 6364136223846793005ull + 1442695040888963407ull;
          return static_cast<int>((state >> 33) % 1000);
        };
        for (int step = 0; step < 400; ++step) {
          const int r = next();
          if (r < 450) {
            const CopyRequest copy{.bytes = 200 + next() * 3};
            fixed.enqueue(copy);
            retimed.enqueue(copy);
          } else if (r < 900) {
            const double work = next() * 2e-6;
            fixed.advance(work);
            retimed.advance(work);
          } else if (fixed.last_ticket() > 0) {
            const Ticket t = 1 + next() % fixed.last_ticket();
            fixed.wait(t);
            retimed.wait(t);
          }
          ASSERT_NEAR(retimed.now(), fixed.now(), 1e-9) << step;
          ASSERT_NEAR(retimed.busy_until(), fixed.busy_until(), 1e-9) << step;
          ASSERT_EQ(retimed.completed(), fixed.completed()) << step;
        }
        ASSERT_EQ(retimed.log().size(), fixed.log().size());
        for (size_t i = 0; i < fixed.log().size(); ++i) {
          EXPECT_NEAR(retimed.log()[i].start, fixed.log()[i].start, 1e-9) << i;
          EXPECT_NEAR(retimed.log()[i].end, fixed.log()[i].end, 1e-9) << i;
        }
        EXPECT_NEAR(retimed.busy_seconds(), fixed.busy_seconds(), 1e-9);
      }
    }
  }
}

TEST(SimulatedLink, RejectsBadChannelCounts) {
  for (const int bad : {0, -1, 1025}) {
    EXPECT_THROW(SimulatedLink({.bandwidth_bytes_per_s = 1e6, .channels = bad}), Error) << bad;
  }
}

TEST(SimulatedLink, RejectsNonPositiveBandwidth) {
  EXPECT_THROW(SimulatedLink({.bandwidth_bytes_per_s = 0, .latency_s = 0}), Error);
  EXPECT_THROW(SimulatedLink({.bandwidth_bytes_per_s = 1e9, .latency_s = -1}), Error);
}

}  // namespace
}  // namespace steermoe::link
