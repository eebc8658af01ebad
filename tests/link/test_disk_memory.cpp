// Bounded memory: reading experts of a file much larger than the slots keeps the process's
// resident set at the slots plus small buffers, and O_DIRECT keeps the file out of the page
// cache (checked with mincore; the buffered path, as a control, fills it).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <vector>

#include "link/disk_link.hpp"
#include "test_util.hpp"

namespace steermoe::link {
namespace {

using testing::rss_bytes;
using testing::scratch;

constexpr uint64_t kFileBytes = 200ull << 20;
constexpr int32_t kExperts = 48;
constexpr uint64_t kExpertBytes = 4ull << 20;

// Fraction of the file's pages in the page cache.
double cached_fraction(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  EXPECT_GE(fd, 0);
  void* p = ::mmap(nullptr, kFileBytes, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  EXPECT_NE(p, MAP_FAILED);
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> in_core(kFileBytes / page);
  EXPECT_EQ(::mincore(p, kFileBytes, in_core.data()), 0);
  ::munmap(p, kFileBytes);
  size_t n = 0;
  for (unsigned char c : in_core) n += c & 1;
  return static_cast<double>(n) / static_cast<double>(in_core.size());
}

void drop_cache(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::fdatasync(fd), 0);
  ASSERT_EQ(::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
  ::close(fd);
}

TEST(DiskLinkMemory, ResidentSetStaysAtTheSlotsAndThePageCacheStaysEmpty) {
  const auto dir = scratch("memory");
  const auto path = dir / "big.bin";
  testing::write_pattern_file(path, kFileBytes);
  ExpertLayout layout({{path, kFileBytes}}, {0}, kExperts);
  for (int32_t e = 0; e < kExperts; ++e) {
    const PartSource p[] = {
        {0, static_cast<uint64_t>(e) * kExpertBytes + 123, kExpertBytes - 200, nullptr}};
    layout.add_expert(p);
  }
  SlotArena arena(1, 4, layout.slot_bytes());
  std::memset(arena.slot(0, 0), 0, arena.total_bytes());  // the slots count from the start

  auto read_all = [&](DiskLinkOptions o) {
    DiskLink link(layout, arena, o);
    Ticket t = kNoTicket;
    for (int32_t e = 0; e < kExperts; ++e)
      t = link.enqueue({.layer = 0, .slot = e % 4, .expert = e});
    link.wait(t);
    return link.direct_refused();
  };

  drop_cache(path);
  ASSERT_LT(cached_fraction(path), 0.02) << "posix_fadvise(DONTNEED) did not drop the file";
  const uint64_t before = rss_bytes();
  const bool refused = read_all({.io = DiskIo::kAuto, .direct = true});
  const uint64_t after = rss_bytes();
  if (refused) GTEST_SKIP() << "this filesystem refuses O_DIRECT";
  // The file is 200 MB, the slots 16 MB (already resident): what the read adds is buffers only.
  EXPECT_LT(after, before + (8ull << 20)) << "RSS grew from " << before << " to " << after;
  EXPECT_LT(cached_fraction(path), 0.02) << "O_DIRECT reads left the file in the page cache";

  // The last four experts are in the slots, byte for byte (checked with pread).
  std::vector<std::byte> want(kExpertBytes);
  const int fd = ::open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  for (int32_t e = kExperts - 4; e < kExperts; ++e) {
    const ExpertPart& p = layout.parts(0, e)[0];
    ASSERT_EQ(::pread(fd, want.data(), p.bytes, static_cast<off_t>(p.file_offset)),
              static_cast<ssize_t>(p.bytes));
    EXPECT_EQ(std::memcmp(arena.slot(0, e % 4) + p.slot_offset, want.data(), p.bytes), 0) << e;
  }
  ::close(fd);

  // Control: buffered reads do fill the page cache, so the check above can see it.
  drop_cache(path);
  read_all({.io = DiskIo::kPread, .direct = false});
  EXPECT_GT(cached_fraction(path), 0.5);
  drop_cache(path);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace steermoe::link
