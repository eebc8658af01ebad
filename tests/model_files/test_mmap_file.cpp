#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>

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

TEST(MappedFile, EmptyFileAndErrors) {
  ScratchDir dir;
  testing::write_text(dir / "empty", "");
  const MappedFile empty = MappedFile::open(dir / "empty");
  EXPECT_EQ(empty.size(), 0u);
  EXPECT_TRUE(empty.bytes().empty());
  EXPECT_ERROR_WITH(MappedFile::open(dir / "absent"), "absent: open: cannot open a model or data file");
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
