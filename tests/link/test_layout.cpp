// The pure parts of link/: the slot layout rule, the slot arena, the checksum, the copy queue
// and the completion watermark.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <thread>
#include <vector>

#include "common/error.hpp"
#include "link/checksum.hpp"
#include "link/copy_queue.hpp"
#include "link/expert_layout.hpp"
#include "link/slot_arena.hpp"

namespace steermoe::link {
namespace {

using ::testing::HasSubstr;

TEST(ExpertLayout, PartsGetAlignedRegionsAndLandAtTheirOffsetWithinThePage) {
  ExpertLayout layout({{"f.bin", 1 << 20}}, {3}, 2);
  const PartSource a[] = {{0, 100, 5000, nullptr}, {0, 8192, 4096, nullptr}, {0, 4095, 2, nullptr}};
  layout.add_expert(a);
  const PartSource b[] = {{0, 0, 10, nullptr}};
  layout.add_expert(b);
  ASSERT_TRUE(layout.complete());
  const auto p = layout.parts(0, 0);
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(p[0].slot_offset, 100u);
  EXPECT_EQ(p[0].read_begin(), 0u);
  EXPECT_EQ(p[0].read_end(), 8192u);
  EXPECT_EQ(p[0].slot_read_offset(), 0u);
  EXPECT_EQ(p[1].slot_offset, 8192u);
  EXPECT_EQ(p[1].read_begin(), 8192u);
  EXPECT_EQ(p[1].read_end(), 12288u);
  EXPECT_EQ(p[2].slot_offset, 12288u + 4095u);
  EXPECT_EQ(p[2].read_begin(), 0u);
  EXPECT_EQ(p[2].read_end(), 8192u);
  EXPECT_EQ(p[2].slot_read_offset(), 12288u);
  // Every aligned read fits the part's region and regions do not overlap.
  for (size_t i = 0; i + 1 < p.size(); ++i)
    EXPECT_LE(p[i].slot_read_offset() + (p[i].read_end() - p[i].read_begin()),
              p[i + 1].slot_read_offset());
  EXPECT_EQ(layout.slot_bytes(), 12288u + 8192u);
  EXPECT_EQ(layout.expert_bytes(0, 0), 5000u + 4096u + 2u);
  EXPECT_EQ(layout.expert_bytes(0, 1), 10u);
  EXPECT_EQ(layout.model_layer(0), 3);
  EXPECT_EQ(layout.describe(0, 1), "layer 3 (MoE layer 0) expert 1");
  EXPECT_TRUE(layout.on_disk());
  EXPECT_FALSE(layout.in_memory());
}

TEST(ExpertLayout, MemoryOnlyPartsStartAtTheirRegion) {
  const std::byte bytes[3] = {};
  ExpertLayout layout({}, {0}, 1);
  const PartSource a[] = {{-1, 0, 3, bytes}, {-1, 0, 3, bytes}};
  layout.add_expert(a);
  EXPECT_EQ(layout.parts(0, 0)[0].slot_offset, 0u);
  EXPECT_EQ(layout.parts(0, 0)[1].slot_offset, 4096u);
  EXPECT_TRUE(layout.in_memory());
  EXPECT_FALSE(layout.on_disk());
}

TEST(ExpertLayout, PartOutsideItsFileIsAnErrorNamingFileAndExpert) {
  ExpertLayout layout({{"model.gguf", 1000}}, {5}, 1);
  const PartSource a[] = {{0, 900, 101, nullptr}};
  try {
    layout.add_expert(a);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("model.gguf"));
    EXPECT_THAT(e.what(), HasSubstr("layer 5 (MoE layer 0) expert 0"));
    EXPECT_THAT(e.what(), HasSubstr("size is 1000"));
  }
}

TEST(SlotArena, SlotsAreAlignedDisjointAndRounded) {
  SlotArena arena(3, 4, 5000);
  EXPECT_EQ(arena.slot_bytes(), 8192u);
  EXPECT_EQ(arena.total_bytes(), 3u * 4u * 8192u);
  for (int l = 0; l < 3; ++l) {
    for (int s = 0; s < 4; ++s) {
      std::byte* p = arena.slot(l, s);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % kDirectAlignment, 0u);
      std::memset(p, l * 4 + s, arena.slot_bytes());
    }
  }
  for (int l = 0; l < 3; ++l)
    for (int s = 0; s < 4; ++s)
      EXPECT_EQ(static_cast<int>(arena.slot(l, s)[arena.slot_bytes() - 1]), l * 4 + s);
  SlotArena moved = std::move(arena);
  EXPECT_EQ(moved.layers(), 3);
  EXPECT_EQ(arena.total_bytes(), 0u);
}

TEST(Checksum, EverySingleByteChangeIsDetected) {
  std::vector<std::byte> buf(100);
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<std::byte>(i * 37);
  const uint64_t ref = checksum64(buf.data(), buf.size());
  for (size_t i = 0; i < buf.size(); ++i) {
    buf[i] ^= std::byte{1};
    EXPECT_NE(checksum64(buf.data(), buf.size()), ref) << "byte " << i;
    buf[i] ^= std::byte{1};
  }
  EXPECT_EQ(checksum64(buf.data(), buf.size()), ref);
  EXPECT_NE(checksum64(buf.data(), buf.size() - 1), ref);
  EXPECT_NE(checksum64(buf.data(), buf.size(), 1), ref);
}

TEST(CopyQueue, FifoAcrossGrowth) {
  CopyQueue q(2);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(q.push({.layer = 0, .slot = 0, .expert = i}, i), i + 1);
  QueuedCopy c;
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(q.pop(c, false));
    EXPECT_EQ(c.ticket, i + 1);
    EXPECT_EQ(c.copy.expert, i);
    EXPECT_EQ(c.enqueued, i);
  }
  EXPECT_FALSE(q.pop(c, false));
  q.close();
  EXPECT_FALSE(q.pop(c, true));
}

TEST(Completion, WaitReturnsWhenPublishedAndRethrowsAnError) {
  Completion done;
  std::thread t([&] {
    for (Ticket i = 1; i <= 100; ++i) done.publish(i);
  });
  done.wait(100);
  EXPECT_EQ(done.completed(), 100);
  t.join();
  std::thread f([&] { done.fail("model.gguf: layer 1: read failed"); });
  EXPECT_THROW(
      {
        try {
          done.wait(101);
        } catch (const Error& e) {
          EXPECT_STREQ(e.what(), "model.gguf: layer 1: read failed");
          throw;
        }
      },
      Error);
  f.join();
  EXPECT_THROW(done.completed(), Error);
  EXPECT_EQ(done.watermark(), 100);
  done.wait(50);  // already complete: returns
}

}  // namespace
}  // namespace steermoe::link
