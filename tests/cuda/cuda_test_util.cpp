#include "cuda_test_util.hpp"

#include <cuda_runtime.h>

#include "engine/cuda_backend_factory.hpp"

namespace steermoe::cudatest {

std::string no_gpu_reason() {
  std::string why;
  return engine::cuda_backend_available(&why) ? std::string() : why;
}

DeviceBuffer::DeviceBuffer(size_t bytes) {
  EXPECT_EQ(cudaMalloc(&ptr_, bytes == 0 ? 1 : bytes), cudaSuccess);
  EXPECT_EQ(cudaMemset(ptr_, 0, bytes == 0 ? 1 : bytes), cudaSuccess);
}
DeviceBuffer::~DeviceBuffer() {
  cudaFree(ptr_);
}
void DeviceBuffer::upload(const void* src, size_t bytes, size_t offset) {
  ASSERT_EQ(cudaMemcpy(static_cast<char*>(ptr_) + offset, src, bytes, cudaMemcpyHostToDevice),
            cudaSuccess);
}
void DeviceBuffer::download(void* dst, size_t bytes, size_t offset) const {
  ASSERT_EQ(cudaMemcpy(dst, static_cast<const char*>(ptr_) + offset, bytes, cudaMemcpyDeviceToHost),
            cudaSuccess);
}

void sync() {
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << cudaGetErrorString(cudaGetLastError());
}

std::vector<float> random_floats(std::mt19937& rng, size_t n, float lo, float hi) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

}  // namespace steermoe::cudatest
