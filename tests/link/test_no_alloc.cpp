// The links allocate nothing per copy once warm (the copy queue's ring has grown to its peak).
#include <gtest/gtest.h>

#include "../alloc_counter.hpp"
#include "link/disk_link.hpp"
#include "link/emulated_link.hpp"
#include "test_util.hpp"

namespace steermoe::link {
namespace {

using testing::make_synthetic;
using testing::scratch;

int64_t allocations_of_copies(Link& link, int n) {
  auto run = [&] {
    Ticket t = kNoTicket;
    for (int i = 0; i < n; ++i)
      t = link.enqueue({.layer = i % 2, .slot = i % 3, .expert = (i * 7) % 5});
    link.wait(t);
    link.completed();
  };
  run();  // warm-up
  steermoe::test_support::start_counting_allocations();
  run();
  return steermoe::test_support::stop_counting_allocations();
}

TEST(LinkNoAlloc, EmulatedLink) {
  auto m = make_synthetic(scratch("noalloc_emulated"), 2, 5, 3, 2 << 20, 100'000);
  SlotArena arena(2, 3, m.layout.slot_bytes());
  EmulatedLink link(m.layout, arena, {.bandwidth_bytes_per_s = 1e12});
  EXPECT_EQ(allocations_of_copies(link, 200), 0);
}

TEST(LinkNoAlloc, DiskLinkBothPaths) {
  auto m = make_synthetic(scratch("noalloc_disk"), 2, 5, 3, 2 << 20, 100'000);
  SlotArena arena(2, 3, m.layout.slot_bytes());
  for (const DiskIo io : {DiskIo::kUring, DiskIo::kPread}) {
    DiskLinkOptions o;
    o.io = io;
    o.verify = true;
    o.chunk_bytes = 64 << 10;
    DiskLink link(m.layout, arena, o);
    EXPECT_EQ(allocations_of_copies(link, 200), 0) << link.mode();
  }
}

}  // namespace
}  // namespace steermoe::link
