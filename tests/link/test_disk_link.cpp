// The disk link on both I/O paths (io_uring, pread) with and without O_DIRECT: the bytes it
// reads, FIFO completion, and every injected fault ending in a clear error with no completion
// of the faulty copy.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <map>
#include <random>
#include <thread>

#include "common/error.hpp"
#include "link/checksum.hpp"
#include "link/disk_link.hpp"
#include "test_util.hpp"

namespace steermoe::link {
namespace {

using ::testing::HasSubstr;
using testing::make_synthetic;
using testing::scratch;
using testing::slot_holds;
using testing::SyntheticModel;
using Kind = FaultPlan::Kind;

struct Variant {
  DiskIo io;
  bool direct;
};

std::string variant_name(const ::testing::TestParamInfo<Variant>& info) {
  return std::string(info.param.io == DiskIo::kUring ? "Uring" : "Pread") +
         (info.param.direct ? "Direct" : "Buffered");
}

class DiskLinkTest : public ::testing::TestWithParam<Variant> {
 protected:
  void SetUp() override {
    const std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::string dir = "disk_" + name;
    for (char& c : dir)
      if (c == '/') c = '_';
    m_ = make_synthetic(scratch(dir), 2, 10, 3, 8 << 20, 600'000);
    arena_ = SlotArena(2, 4, m_.layout.slot_bytes());
    // Poison: freed memory of an earlier test may hold the same experts.
    std::memset(arena_.slot(0, 0), 0xEE, arena_.total_bytes());
  }

  void TearDown() override {
    m_.map = MappedFile();
    std::filesystem::remove_all(m_.path.parent_path());
  }

  DiskLinkOptions options() const {
    DiskLinkOptions o;
    o.io = GetParam().io;
    o.direct = GetParam().direct;
    o.chunk_bytes = 64 << 10;  // several reads per part
    o.queue_depth = 8;
    return o;
  }

  std::unique_ptr<DiskLink> open(DiskLinkOptions o) {
    auto link = std::make_unique<DiskLink>(m_.layout, arena_, std::move(o));
    EXPECT_EQ(link->uses_uring(), GetParam().io == DiskIo::kUring);
    if (GetParam().direct && link->direct_refused()) {
      skipped_ = true;
    }
    return link;
  }

  // Enqueues `n` copies with a fixed sequence; returns the copies.
  std::vector<CopyRequest> sequence(int n, uint64_t seed) const {
    std::mt19937_64 rng(seed);
    std::vector<CopyRequest> s;
    for (int i = 0; i < n; ++i) {
      s.push_back({.layer = static_cast<int32_t>(rng() % 2),
                   .slot = static_cast<int32_t>(rng() % 4),
                   .expert = static_cast<int32_t>(rng() % 10),
                   .bytes = 0});
    }
    return s;
  }

  // Runs `copies` and expects an error naming the file and the expert of copies[bad - 1];
  // returns the message.
  std::string expect_failure(DiskLink& link, const std::vector<CopyRequest>& copies, size_t bad) {
    Ticket t = kNoTicket, first = kNoTicket;
    std::string message;
    // The fault may surface while later copies are still being enqueued (enqueue rethrows it).
    try {
      for (const CopyRequest& c : copies) {
        t = link.enqueue(c);
        if (first == kNoTicket) first = t;
      }
      link.wait(t);
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      message = e.what();
    }
    const CopyRequest& c = copies[bad - 1];
    EXPECT_THAT(message, HasSubstr(m_.path.string()));
    EXPECT_THAT(message, HasSubstr(m_.layout.describe(c.layer, c.expert) + ":"));
    EXPECT_TRUE(link.failed());
    EXPECT_LT(link.watermark(), first + static_cast<Ticket>(bad) - 1);  // it never completes
    EXPECT_THROW(link.completed(), Error);
    EXPECT_THROW(link.enqueue(copies[0]), Error);
    return message;
  }

  SyntheticModel m_;
  SlotArena arena_;
  bool skipped_ = false;
};

#define SKIP_IF_DIRECT_REFUSED() \
  if (skipped_)                  \
  GTEST_SKIP() << "this filesystem refuses O_DIRECT (the buffered variant covers the rest)"

TEST_P(DiskLinkTest, RandomCopiesLandTheRightBytes) {
  auto link = open(options());
  SKIP_IF_DIRECT_REFUSED();
  EXPECT_THAT(link->mode(), HasSubstr(GetParam().direct ? "O_DIRECT" : "buffered"));
  const auto copies = sequence(400, 5);
  std::map<std::pair<int, int>, int> last;
  Ticket t = kNoTicket;
  for (size_t i = 0; i < copies.size(); ++i) {
    t = link->enqueue(copies[i]);
    EXPECT_EQ(t, static_cast<Ticket>(i + 1));
    last[{copies[i].layer, copies[i].slot}] = copies[i].expert;
    if (i % 100 == 99) {
      link->wait(t);
      EXPECT_GE(link->completed(), t);
    }
  }
  link->wait(t);
  EXPECT_EQ(link->completed(), t);
  for (const auto& [ls, e] : last)
    EXPECT_TRUE(slot_holds(m_.layout, ls.first, e, arena_.slot(ls.first, ls.second)));
  EXPECT_GT(link->bytes_read(), 0);
}

TEST_P(DiskLinkTest, VerifyPassesOnGoodReadsWithReferencesFromAFullPass) {
  DiskLinkOptions o = options();
  o.verify = true;
  auto link = open(o);
  SKIP_IF_DIRECT_REFUSED();
  const auto& ref = link->reference_checksums();
  ASSERT_EQ(ref.size(), 20u);
  SlotArena one(1, 1, m_.layout.slot_bytes());
  for (int32_t e = 0; e < 10; ++e) {
    for (const ExpertPart& p : m_.layout.parts(1, e))
      std::memcpy(one.slot(0, 0) + p.slot_offset, p.source, p.bytes);
    EXPECT_EQ(ref[10 + static_cast<size_t>(e)], expert_checksum(m_.layout, 1, e, one.slot(0, 0)));
  }
  Ticket t = kNoTicket;
  for (const CopyRequest& c : sequence(100, 9)) t = link->enqueue(c);
  link->wait(t);
  EXPECT_EQ(link->completed(), t);
}

TEST_P(DiskLinkTest, IoErrorEndsWithAClearError) {
  DiskLinkOptions o = options();
  o.faults.faults.push_back({.ticket = 3, .kind = Kind::kIoError});
  auto link = open(o);
  SKIP_IF_DIRECT_REFUSED();
  const std::string msg = expect_failure(*link, sequence(12, 1), 3);
  EXPECT_THAT(msg, HasSubstr("Input/output error"));
}

TEST_P(DiskLinkTest, EndOfFileBeforeTheExpertEndsIsAnError) {
  DiskLinkOptions o = options();
  o.faults.faults.push_back({.ticket = 4, .kind = Kind::kEarlyEof});
  auto link = open(o);
  SKIP_IF_DIRECT_REFUSED();
  const std::string msg = expect_failure(*link, sequence(12, 2), 4);
  EXPECT_THAT(msg, HasSubstr("the file ends at byte"));
}

TEST_P(DiskLinkTest, ShortReadIsResubmittedAndCompletes) {
  DiskLinkOptions o = options();
  o.chunk_bytes = 1 << 20;  // whole parts, so the short read leaves a real rest
  for (Ticket t = 1; t <= 6; ++t)
    o.faults.faults.push_back({.ticket = t, .kind = Kind::kShortRead});
  auto link = open(o);
  SKIP_IF_DIRECT_REFUSED();
  // Six copies into six different slots, each of an expert with a part longer than a page.
  Ticket t = kNoTicket;
  std::vector<CopyRequest> copies;
  for (int32_t i = 0; i < 6; ++i) copies.push_back({.layer = i / 4, .slot = i % 4, .expert = i});
  for (const CopyRequest& c : copies) t = link->enqueue(c);
  link->wait(t);
  for (const CopyRequest& c : copies)
    EXPECT_TRUE(slot_holds(m_.layout, c.layer, c.expert, arena_.slot(c.layer, c.slot)));
}

TEST_P(DiskLinkTest, ACopyIntoASlotLandsAfterTheEarlierCopyIntoThatSlot) {
  // The first copy's only read comes back short and is resubmitted, after the second copy
  // (same slot) was enqueued: the slot must still end up holding the second expert.
  m_ = make_synthetic(
      scratch(std::string("disk_order_") + (GetParam().io == DiskIo::kUring ? "u" : "p") +
              (GetParam().direct ? "d" : "b")),
      2, 10, 1, 8 << 20, 600'000);
  DiskLinkOptions o = options();
  o.chunk_bytes = 1 << 20;
  std::vector<CopyRequest> copies;
  for (int i = 0; i < 20; ++i) {
    copies.push_back({.layer = 0, .slot = 0, .expert = 2 * (i % 5)});
    copies.push_back({.layer = 0, .slot = 0, .expert = 2 * (i % 5) + 1});
    o.faults.faults.push_back({.ticket = 2 * i + 1, .kind = Kind::kShortRead});
  }
  auto link = open(o);
  SKIP_IF_DIRECT_REFUSED();
  for (size_t i = 0; i < copies.size(); i += 2) {
    link->enqueue(copies[i]);
    link->wait(link->enqueue(copies[i + 1]));
    ASSERT_TRUE(slot_holds(m_.layout, 0, copies[i + 1].expert, arena_.slot(0, 0))) << i;
  }
}

TEST_P(DiskLinkTest, DelayedCompletionHoldsBackLaterTickets) {
  DiskLinkOptions o = options();
  o.faults.faults.push_back({.ticket = 2, .kind = Kind::kDelay, .delay_s = 0.4});
  auto link = open(o);
  SKIP_IF_DIRECT_REFUSED();
  Ticket t = kNoTicket;
  for (const CopyRequest& c : sequence(6, 3)) t = link->enqueue(c);
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  EXPECT_LT(link->completed(), 2);  // later copies may have been read; none is reported
  link->wait(t);
  EXPECT_EQ(link->completed(), 6);
}

// The link's busy time: from a copy's enqueue to its completion, idle time between copies left
// out (what bench divides the bytes by to report the rate a configuration's copies reached).
TEST_P(DiskLinkTest, BusySecondsCountOnlyTimeWithACopyInFlight) {
  DiskLinkOptions o = options();
  o.faults.faults.push_back({.ticket = 1, .kind = Kind::kDelay, .delay_s = 0.3});
  o.faults.faults.push_back({.ticket = 2, .kind = Kind::kDelay, .delay_s = 0.2});
  auto link = open(o);
  SKIP_IF_DIRECT_REFUSED();
  EXPECT_EQ(link->busy_seconds(), 0.0);
  const auto copies = sequence(2, 9);
  double t0 = link->now();
  link->wait(link->enqueue(copies[0]));
  const double first = link->busy_seconds();
  EXPECT_GE(first, 0.3);
  EXPECT_LE(first, link->now() - t0);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // idle: not busy
  EXPECT_EQ(link->busy_seconds(), first);
  t0 = link->now();
  link->wait(link->enqueue(copies[1]));
  const double second = link->busy_seconds() - first;
  EXPECT_GE(second, 0.2);
  EXPECT_LE(second, link->now() - t0);
}

TEST_P(DiskLinkTest, CorruptBytesAreCaughtByVerify) {
  DiskLinkOptions o = options();
  o.verify = true;
  o.faults.faults.push_back({.ticket = 5, .kind = Kind::kCorrupt});
  auto link = open(o);
  SKIP_IF_DIRECT_REFUSED();
  const std::string msg = expect_failure(*link, sequence(10, 4), 5);
  EXPECT_THAT(msg, HasSubstr("checksum mismatch"));
  EXPECT_EQ(link->watermark(), 4);  // every copy before the bad one completed
}

TEST_P(DiskLinkTest, CorruptBytesPassUnnoticedWithoutVerify) {
  DiskLinkOptions o = options();
  o.faults.faults.push_back({.ticket = 1, .kind = Kind::kCorrupt});
  auto link = open(o);
  SKIP_IF_DIRECT_REFUSED();
  link->wait(link->enqueue({.layer = 0, .slot = 0, .expert = 0}));
  EXPECT_FALSE(slot_holds(m_.layout, 0, 0, arena_.slot(0, 0)));  // why verify exists
}

TEST_P(DiskLinkTest, TruncatedFileIsDetected) {
  auto link = open(options());
  SKIP_IF_DIRECT_REFUSED();
  ASSERT_EQ(::truncate(m_.path.c_str(), 1 << 20), 0);
  // The last expert ends at the old end of the file.
  std::vector<CopyRequest> copies = {{.layer = 1, .slot = 0, .expert = 9}};
  const std::string msg = expect_failure(*link, copies, 1);
  EXPECT_THAT(msg, HasSubstr("truncated"));
}

TEST_P(DiskLinkTest, FileModifiedInPlaceIsDetected) {
  auto link = open(options());
  SKIP_IF_DIRECT_REFUSED();
  link->wait(link->enqueue({.layer = 0, .slot = 0, .expert = 0}));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // a distinct mtime
  const int fd = ::open(m_.path.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  const char byte = 1;
  ASSERT_EQ(::pwrite(fd, &byte, 1, 12345), 1);
  ::close(fd);
  std::vector<CopyRequest> copies = {{.layer = 0, .slot = 1, .expert = 1}};
  const std::string msg = expect_failure(*link, copies, 1);
  EXPECT_THAT(msg, HasSubstr("modified while being served"));
}

TEST_P(DiskLinkTest, FileReplacedIsDetected) {
  auto link = open(options());
  SKIP_IF_DIRECT_REFUSED();
  const auto other = m_.path.parent_path() / "other.bin";
  testing::write_pattern_file(other, 8 << 20, 99);
  std::filesystem::rename(other, m_.path);
  std::vector<CopyRequest> copies = {{.layer = 0, .slot = 1, .expert = 1}};
  const std::string msg = expect_failure(*link, copies, 1);
  EXPECT_THAT(msg, HasSubstr("replaced while being served"));
}

TEST_P(DiskLinkTest, FileOfAnotherSizeIsRefusedAtOpen) {
  ASSERT_EQ(::truncate(m_.path.c_str(), 4 << 20), 0);
  try {
    DiskLink link(m_.layout, arena_, options());
    FAIL() << "opened";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr(m_.path.string() + ": size: expected 8388608 bytes"));
  }
}

INSTANTIATE_TEST_SUITE_P(Paths, DiskLinkTest,
                         ::testing::Values(Variant{DiskIo::kUring, true},
                                           Variant{DiskIo::kUring, false},
                                           Variant{DiskIo::kPread, true},
                                           Variant{DiskIo::kPread, false}),
                         variant_name);

TEST(DiskLink, RefusesExpertsThatAreNotInAFile) {
  const std::byte bytes[8] = {};
  ExpertLayout layout({}, {0}, 1);
  const PartSource a[] = {{-1, 0, 8, bytes}};
  layout.add_expert(a);
  SlotArena arena(1, 1, layout.slot_bytes());
  EXPECT_THROW(DiskLink(layout, arena, {}), Error);
}

}  // namespace
}  // namespace steermoe::link
