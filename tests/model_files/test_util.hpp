// Helpers for the container tests: a little-endian byte builder for hand-made (often
// deliberately broken) files, scratch folders, and matchers on Error messages.
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "model/dtype.hpp"

namespace steermoe::model::testing {

// The llama.cpp oracle, committed under tests/data/oracle (see its README). A missing oracle
// fails the test (never a silent skip).
inline std::filesystem::path oracle() { return std::filesystem::path(STEERMOE_ORACLE_DIR); }
#define SKIP_WITHOUT_ORACLE()                                                           \
  if (!std::filesystem::exists(::steermoe::model::testing::oracle() / "README.md"))     \
  GTEST_FAIL() << "oracle folder not found at " << ::steermoe::model::testing::oracle() \
               << " (tests/data/oracle of the repository)"

// `b` has the shape and the bytes of `a` (the tensor `name` read back from a written file). Its
// byte-count check is fatal: call it under ASSERT_NO_FATAL_FAILURE.
inline void expect_same_tensor(const TensorView& a, const TensorView& b, const std::string& name) {
  EXPECT_EQ(a.shape, b.shape);
  ASSERT_EQ(a.nbytes, b.nbytes);
  EXPECT_EQ(std::memcmp(a.data, b.data, a.nbytes), 0) << name;
}

class Bytes {
 public:
  template <typename T>
  Bytes& put(T value) {
    const auto* p = reinterpret_cast<const std::byte*>(&value);
    data_.insert(data_.end(), p, p + sizeof value);
    return *this;
  }
  Bytes& u8(uint8_t v) { return put(v); }
  Bytes& u32(uint32_t v) { return put(v); }
  Bytes& u64(uint64_t v) { return put(v); }
  Bytes& f32(float v) { return put(v); }
  Bytes& raw(std::string_view s) {
    const auto* p = reinterpret_cast<const std::byte*>(s.data());
    data_.insert(data_.end(), p, p + s.size());
    return *this;
  }
  // GGUF string: u64 length + bytes.
  Bytes& str(std::string_view s) { return u64(s.size()).raw(s); }
  Bytes& zeros(size_t n) {
    data_.insert(data_.end(), n, std::byte{0});
    return *this;
  }
  Bytes& pad_to(size_t alignment) {
    return zeros((alignment - data_.size() % alignment) % alignment);
  }
  size_t size() const { return data_.size(); }
  const std::vector<std::byte>& data() const { return data_; }
  std::vector<std::byte> take() { return std::move(data_); }

 private:
  std::vector<std::byte> data_;
};

// A fresh folder under the system temp dir, removed when the test ends.
class ScratchDir {
 public:
  ScratchDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = std::filesystem::temp_directory_path() /
            ("steermoe_model_files_" + std::string(info->test_suite_name()) + "_" + info->name() +
             "_" + std::to_string(::getpid()));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

inline void write_file(const std::filesystem::path& path, const std::vector<std::byte>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}
inline void write_text(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}
inline std::vector<std::byte> read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> chars((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> bytes(chars.size());
  if (!chars.empty()) std::memcpy(bytes.data(), chars.data(), chars.size());
  return bytes;
}

// EXPECT that `statement` throws steermoe::Error whose message contains every given fragment.
#define EXPECT_ERROR_WITH(statement, ...)                                   \
  do {                                                                      \
    try {                                                                   \
      statement;                                                            \
      ADD_FAILURE() << "expected steermoe::Error from: " #statement;        \
    } catch (const ::steermoe::Error& e) {                                  \
      for (const std::string fragment : {__VA_ARGS__}) {                    \
        EXPECT_THAT(std::string(e.what()), ::testing::HasSubstr(fragment)); \
      }                                                                     \
    }                                                                       \
  } while (0)

}  // namespace steermoe::model::testing
