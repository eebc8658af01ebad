// The emulated link: the spec string, the bytes it moves, and its timing (loose bounds only;
// this machine is shared and noisy).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <thread>

#include "common/error.hpp"
#include "link/emulated_link.hpp"
#include "test_util.hpp"

namespace steermoe::link {
namespace {

using ::testing::HasSubstr;
using testing::make_synthetic;
using testing::scratch;
using testing::slot_holds;

TEST(EmulatedSpec, ParsesBandwidthAndLatency) {
  EmulatedLinkParams p = parse_emulated_spec("emulated:25");
  EXPECT_DOUBLE_EQ(p.bandwidth_bytes_per_s, 25e9);
  EXPECT_DOUBLE_EQ(p.latency_s, 0);
  p = parse_emulated_spec("emulated:12.5,10");
  EXPECT_DOUBLE_EQ(p.bandwidth_bytes_per_s, 12.5e9);
  EXPECT_DOUBLE_EQ(p.latency_s, 10e-6);
}

TEST(EmulatedSpec, BadStringsNameTheField) {
  const std::pair<const char*, const char*> cases[] = {{"emu:5", "form"},
                                                       {"emulated:", "bandwidth"},
                                                       {"emulated:x", "bandwidth"},
                                                       {"emulated:0", "bandwidth"},
                                                       {"emulated:-1", "bandwidth"},
                                                       {"emulated:5,", "latency"},
                                                       {"emulated:5,a", "latency"},
                                                       {"emulated:5,-2", "latency"},
                                                       {"emulated:5,1,2", "latency"},
                                                       {"emulated:nan", "bandwidth"}};
  for (const auto& [spec, field] : cases) {
    try {
      parse_emulated_spec(spec);
      ADD_FAILURE() << spec << " parsed";
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), HasSubstr(std::string("--link: ") + field)) << spec;
    }
  }
}

// Random copies into few slots: each slot ends holding the last expert copied into it.
void check_random_copies(const EmulatedLinkParams& params, uint64_t seed) {
  auto m = make_synthetic(scratch("emulated_random"), 3, 8, 3, 4 << 20, 200'000);
  SlotArena arena(3, 3, m.layout.slot_bytes());
  EmulatedLink link(m.layout, arena, params);
  std::mt19937_64 rng(seed);
  std::map<std::pair<int, int>, int> last;
  Ticket t = kNoTicket;
  for (int i = 0; i < 300; ++i) {
    const CopyRequest c{.layer = static_cast<int32_t>(rng() % 3),
                        .slot = static_cast<int32_t>(rng() % 3),
                        .expert = static_cast<int32_t>(rng() % 8),
                        .bytes = 0};
    t = link.enqueue(c);
    EXPECT_EQ(t, i + 1);
    last[{c.layer, c.slot}] = c.expert;
    if (i % 50 == 49) {
      link.wait(t);
      EXPECT_GE(link.completed(), t);
    }
  }
  link.wait(t);
  EXPECT_EQ(link.completed(), t);
  for (const auto& [ls, e] : last)
    EXPECT_TRUE(slot_holds(m.layout, ls.first, e, arena.slot(ls.first, ls.second)));
}

TEST(EmulatedLink, CopiesTheRightBytes) {
  check_random_copies({.bandwidth_bytes_per_s = 1e12}, 1);
}

TEST(EmulatedLink, CopiesTheRightBytesWithRandomDelays) {
  check_random_copies({.bandwidth_bytes_per_s = 1e12, .extra_delay_max_s = 50e-6, .delay_seed = 3},
                      2);
}

TEST(EmulatedLink, NeedsHostSources) {
  ExpertLayout layout({{"f", 8192}}, {0}, 1);
  const PartSource a[] = {{0, 0, 100, nullptr}};
  layout.add_expert(a);
  SlotArena arena(1, 1, layout.slot_bytes());
  EXPECT_THROW(EmulatedLink(layout, arena, {.bandwidth_bytes_per_s = 1e9}), Error);
}

TEST(EmulatedLink, BackToBackCopiesTakeBytesOverBandwidthPlusLatency) {
  auto m = make_synthetic(scratch("emulated_timing"), 1, 4, 1, 1 << 20, 100'000);
  SlotArena arena(1, 2, m.layout.slot_bytes());
  // 10 copies of a nominal 1 MB at 0.5 GB/s + 1 ms: 3 ms each, 30 ms in all.
  EmulatedLink link(m.layout, arena, {.bandwidth_bytes_per_s = 0.5e9, .latency_s = 1e-3});
  const double t0 = link.now();
  Ticket t = kNoTicket;
  for (int i = 0; i < 10; ++i)
    t = link.enqueue({.layer = 0, .slot = i % 2, .expert = i % 4, .bytes = 1'000'000});
  EXPECT_LT(link.completed(), 10);  // not all done at once
  link.wait(t);
  const double elapsed = link.now() - t0;
  EXPECT_GE(elapsed, 0.030 * 0.99);
  EXPECT_LT(elapsed, 3.0);  // loose: a shared machine
}

TEST(EmulatedLink, ACopyStartsAtItsEnqueueTimeWhenTheLinkWasIdle) {
  auto m = make_synthetic(scratch("emulated_idle"), 1, 2, 1, 1 << 20, 100'000);
  SlotArena arena(1, 2, m.layout.slot_bytes());
  EmulatedLink link(m.layout, arena, {.bandwidth_bytes_per_s = 1e9});
  // 20 ms copies: the first ends, the link idles, the second is enqueued later.
  link.wait(link.enqueue({.layer = 0, .slot = 0, .expert = 0, .bytes = 20'000'000}));
  std::this_thread::sleep_for(std::chrono::milliseconds(40));
  const double enqueued = link.now();
  const Ticket t = link.enqueue({.layer = 0, .slot = 1, .expert = 1, .bytes = 20'000'000});
  EXPECT_EQ(link.completed(), 1);
  link.wait(t);
  EXPECT_GE(link.now() - enqueued, 0.020 * 0.99);  // not counted from the previous copy's end
}

}  // namespace
}  // namespace steermoe::link
