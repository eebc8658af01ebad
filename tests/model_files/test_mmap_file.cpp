#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <vector>

#include "model/file_writer.hpp"
#include "test_util.hpp"

namespace steermoe::model {
namespace {

using testing::ScratchDir;

TEST(MappedFile, MapsContentsAndMoves) {
  ScratchDir dir;
  testing::write_text(dir / "f.bin", "hello weights");
  MappedFile a = MappedFile::open(dir / "f.bin");
  ASSERT_EQ(a.size(), 13u);
  EXPECT_EQ(std::memcmp(a.data(), "hello weights", 13), 0);
  EXPECT_EQ(a.path(), dir / "f.bin");
  a.prefetch(0, 1 << 20);  // out-of-range lengths are clamped, not an error
  MappedFile b = std::move(a);
  EXPECT_EQ(a.data(), nullptr);  // NOLINT(bugprone-use-after-move): moved-from is empty
  EXPECT_EQ(a.size(), 0u);
  EXPECT_EQ(b.size(), 13u);
  MappedFile c;
  c = std::move(b);
  EXPECT_EQ(std::memcmp(c.bytes().data(), "hello", 5), 0);
}

// Whole 2 MiB windows of a range become anonymous memory with the same bytes at the same
// addresses: views stay valid, and the promoted bytes no longer follow the file (a mapping of
// the file's page cache would show a later write to the file; Linux's MAP_PRIVATE does).
TEST(MappedFile, PromotedWindowsKeepTheirBytesAndLeaveThePageCache) {
  ScratchDir dir;
  constexpr size_t kSize = 9u << 20, kHuge = 2u << 20;
  std::vector<std::byte> bytes(kSize);
  for (size_t i = 0; i < kSize; ++i) bytes[i] = static_cast<std::byte>((i * 131) >> 7);
  {
    OutputFile out(dir / "w.bin");
    out.write(bytes);
    out.commit();
  }
  MappedFile f = MappedFile::open(dir / "w.bin");
  const std::byte* before = f.data();
  const uint64_t begin = 1000, length = (7u << 20) - 1000;
  const uint64_t moved = f.promote_to_huge_pages(begin, length);
  EXPECT_EQ(f.data(), before);
  EXPECT_GE(moved, 2 * kHuge);  // 7 MiB less 1000 bytes hold at least two whole windows
  EXPECT_LE(moved, length);
  EXPECT_EQ(moved % kHuge, 0u);
  ASSERT_EQ(std::memcmp(f.data(), bytes.data(), kSize), 0);
  // Nothing outside the range, nothing of a range shorter than a window.
  EXPECT_EQ(f.promote_to_huge_pages(kSize - 100, 100), 0u);
  EXPECT_EQ(f.promote_to_huge_pages(kSize, 1u << 30), 0u);
  // Overwrite the file in place: promoted bytes stay as they were, the rest shows the write.
  {
    std::FILE* w = std::fopen((dir / "w.bin").c_str(), "r+b");
    ASSERT_NE(w, nullptr);
    const std::vector<std::byte> ones(kSize, std::byte{0xA5});
    ASSERT_EQ(std::fwrite(ones.data(), 1, kSize, w), kSize);
    std::fclose(w);
  }
  const auto base = reinterpret_cast<uintptr_t>(f.data());
  size_t kept = 0, followed = 0;
  for (size_t i = 0; i < kSize; i += 4096) {
    const uintptr_t window = (base + i) / kHuge * kHuge;  // the 2 MiB window holding byte i
    const bool in_window = window >= base + begin && window + kHuge <= base + begin + length;
    if (in_window) {
      EXPECT_EQ(f.data()[i], bytes[i]) << i;
      ++kept;
    } else {
      EXPECT_EQ(f.data()[i], std::byte{0xA5}) << i;
      ++followed;
    }
  }
  EXPECT_EQ(kept * 4096, moved);
  EXPECT_GT(followed, 0u);
}

TEST(MappedFile, EmptyFileAndErrors) {
  ScratchDir dir;
  testing::write_text(dir / "empty", "");
  const MappedFile empty = MappedFile::open(dir / "empty");
  EXPECT_EQ(empty.size(), 0u);
  EXPECT_TRUE(empty.bytes().empty());
  EXPECT_ERROR_WITH(MappedFile::open(dir / "absent"),
                    "absent: open: cannot open a model or data file");
  EXPECT_ERROR_WITH(MappedFile::open(dir.path()), ": open: expected a regular file");
}

TEST(OutputFile, CommitRenamesAndAbandonRemoves) {
  ScratchDir dir;
  {
    OutputFile out(dir / "done.bin");
    out.write("abc", 3);
    out.write_zeros(1000);
    std::vector<std::byte> big(5u << 20, std::byte{7});  // larger than the buffer: direct write
    out.write(big);
    EXPECT_EQ(out.position(), 3u + 1000u + (5u << 20));
    EXPECT_TRUE(std::filesystem::exists(dir / "done.bin.tmp"));
    out.commit();
  }
  EXPECT_FALSE(std::filesystem::exists(dir / "done.bin.tmp"));
  const auto bytes = testing::read_file(dir / "done.bin");
  ASSERT_EQ(bytes.size(), 3u + 1000u + (5u << 20));
  EXPECT_EQ(static_cast<char>(bytes[2]), 'c');
  EXPECT_EQ(bytes[500], std::byte{0});
  EXPECT_EQ(bytes.back(), std::byte{7});
  {
    OutputFile out(dir / "abandoned.bin");
    out.write("x", 1);
  }
  EXPECT_FALSE(std::filesystem::exists(dir / "abandoned.bin"));
  EXPECT_FALSE(std::filesystem::exists(dir / "abandoned.bin.tmp"));
  EXPECT_ERROR_WITH(OutputFile(dir / "no" / "such" / "dir.bin"), "dir.bin: write: cannot create");
}

}  // namespace
}  // namespace steermoe::model
