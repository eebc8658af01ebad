// Helpers shared by the trace tests: scratch folders and message matching.
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <span>
#include <string>
#include <vector>

namespace steermoe::trace::testing {

// A fresh empty folder under the system temp dir, removed at destruction.
class ScratchDir {
 public:
  ScratchDir();
  ~ScratchDir();
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

// The router's own top-K of z (ties: lower index), ascending.
std::vector<int32_t> exact_top_k(std::span<const float> z, int k);

std::vector<uint8_t> read_bytes(const std::filesystem::path& path);
void write_bytes(const std::filesystem::path& path, const std::vector<uint8_t>& bytes);
void write_text(const std::filesystem::path& path, const std::string& text);

// Runs `action`, expects a steermoe::Error and returns its message ("" and a test failure if
// none was thrown).
std::string error_of(const std::function<void()>& action);

// Every piece must occur in the message.
#define EXPECT_ERROR_MENTIONS(action, ...)                                                 \
  do {                                                                                     \
    const std::string sm_message_ = ::steermoe::trace::testing::error_of([&] { action; }); \
    for (const char* sm_piece_ : {__VA_ARGS__})                                            \
      EXPECT_THAT(sm_message_, ::testing::HasSubstr(sm_piece_));                           \
  } while (0)

}  // namespace steermoe::trace::testing
