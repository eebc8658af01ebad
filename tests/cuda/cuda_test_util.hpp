// Helpers of the CUDA tests: the skip when no GPU is present, device buffers, bounds.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace steermoe::cudatest {

// Empty when a CUDA device is usable, else the reason (printed by the skip).
std::string no_gpu_reason();

#define SM_REQUIRE_GPU()                                                      \
  do {                                                                        \
    const std::string why_ = ::steermoe::cudatest::no_gpu_reason();           \
    if (!why_.empty()) GTEST_SKIP() << "no GPU, CUDA test skipped: " << why_; \
  } while (0)

// A device buffer of bytes with host round trips.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const { return ptr_; }
  template <typename T>
  T* as(size_t offset_elems = 0) const {
    return static_cast<T*>(ptr_) + offset_elems;
  }
  void upload(const void* src, size_t bytes, size_t offset = 0);
  void download(void* dst, size_t bytes, size_t offset = 0) const;

 private:
  void* ptr_ = nullptr;
};

void sync();  // cudaDeviceSynchronize, failing the test on error

std::vector<float> random_floats(std::mt19937& rng, size_t n, float lo = -1.0f, float hi = 1.0f);

// Unit roundoff of f32 and the bound gamma_n * sum |a_i b_i| of a dot product of n terms
// (plus a small absolute floor): the tolerance every comparison below derives from its inputs.
inline constexpr double kU = 1.0 / (1 << 24);
inline double dot_bound(size_t n, double abs_sum) {
  return 2.0 * static_cast<double>(n + 2) * kU * abs_sum + 1e-30;
}

}  // namespace steermoe::cudatest
