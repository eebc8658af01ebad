// Helpers for the link tests: scratch folders on a filesystem that takes O_DIRECT (the build
// tree, not a tmpfs), pattern files, synthetic layouts over them, and checks of slot contents.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "link/expert_layout.hpp"
#include "link/slot_arena.hpp"
#include "model/file_writer.hpp"

namespace steermoe::link::testing {

namespace fs = std::filesystem;

// A fresh folder under the test's working directory (the build tree: ext4 here, where O_DIRECT
// works; /tmp may be a tmpfs). Removed and recreated on each call.
inline fs::path scratch(const std::string& name) {
  // Per process (TEST_TMPDIR): CTest runs tests of this binary in parallel processes, and two of
  // them may use one name.
  const fs::path dir = fs::path(::testing::TempDir()) / "link_scratch" / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

inline uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xFF51AFD7ED558CCDull;
  x ^= x >> 33;
  x *= 0xC4CEB9FE1A85EC53ull;
  return x ^ (x >> 33);
}

// A file of `size` bytes whose 8-byte word i is mix(i ^ seed) (every range distinguishable).
inline void write_pattern_file(const fs::path& path, uint64_t size, uint64_t seed = 7) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0) << path;
  std::vector<uint64_t> buf(uint64_t{1} << 17);
  for (uint64_t done = 0; done < size;) {
    const uint64_t n = std::min<uint64_t>(buf.size() * 8, size - done);
    for (size_t i = 0; i < buf.size(); ++i) buf[i] = mix((done / 8 + i) ^ seed);
    ASSERT_EQ(::write(fd, buf.data(), n), static_cast<ssize_t>(n));
    done += n;
  }
  ASSERT_EQ(::fsync(fd), 0);
  ::close(fd);
}

// A pattern file, mapped (the host sources), with a random layout of `layers` x `experts`
// experts of `parts` parts each at unaligned offsets (one part ends at the file's last byte, so
// the aligned over-read runs past the end of the file).
struct SyntheticModel {
  fs::path path;
  MappedFile map;
  ExpertLayout layout;
};

inline SyntheticModel make_synthetic(const fs::path& dir, int32_t layers, int32_t experts,
                                     int parts, uint64_t file_size, uint64_t max_part,
                                     uint64_t seed = 1) {
  SyntheticModel m;
  m.path = dir / "experts.bin";
  write_pattern_file(m.path, file_size, seed);
  m.map = MappedFile::open(m.path);
  std::vector<int32_t> model_layers;
  for (int32_t l = 0; l < layers; ++l) model_layers.push_back(2 * l + 1);  // every other layer
  m.layout = ExpertLayout({{m.path, file_size}}, model_layers, experts);
  std::mt19937_64 rng(seed);
  for (int32_t l = 0; l < layers; ++l) {
    for (int32_t e = 0; e < experts; ++e) {
      std::vector<PartSource> ps;
      for (int p = 0; p < parts; ++p) {
        PartSource s;
        s.file = 0;
        s.bytes = 1 + rng() % max_part;
        s.file_offset = (l == layers - 1 && e == experts - 1 && p == parts - 1)
                            ? file_size - s.bytes
                            : rng() % (file_size - s.bytes);
        s.source = m.map.data() + s.file_offset;
        ps.push_back(s);
      }
      m.layout.add_expert(ps);
    }
  }
  return m;
}

// True if `slot` holds expert (l, e)'s bytes at the layout's offsets (reports the first part
// that differs).
inline ::testing::AssertionResult slot_holds(const ExpertLayout& layout, int32_t l, int32_t e,
                                             const std::byte* slot) {
  const auto parts = layout.parts(l, e);
  for (size_t i = 0; i < parts.size(); ++i) {
    const ExpertPart& p = parts[i];
    if (std::memcmp(slot + p.slot_offset, p.source, static_cast<size_t>(p.bytes)) != 0) {
      return ::testing::AssertionFailure()
             << "layer " << l << " expert " << e << " part " << i << " differs";
    }
  }
  return ::testing::AssertionSuccess();
}

// Resident set size of this process in bytes (VmRSS).
inline uint64_t rss_bytes() {
  FILE* f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return 0;
  char line[256];
  uint64_t kb = 0;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    if (std::strncmp(line, "VmRSS:", 6) == 0) {
      kb = std::strtoull(line + 6, nullptr, 10);
      break;
    }
  }
  std::fclose(f);
  return kb * 1024;
}

}  // namespace steermoe::link::testing
