// Internal to kernels/cuda/: launch helpers and the fixed-order reductions shared by the kernel
// files. Every sum is a fixed tree over a fixed thread layout, so results depend only on sizes.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace steermoe::kernels::cuda::detail {

constexpr int kWarp = 32;
constexpr int kThreads = 256;  // threads of a block-reduction kernel

inline cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }
inline int last_error() { return static_cast<int>(cudaGetLastError()); }
inline unsigned blocks(int64_t n, int per) { return static_cast<unsigned>((n + per - 1) / per); }

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int off = kWarp / 2; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

// Fixed-tree block sum over kThreads threads (red: kThreads floats of shared memory); every
// thread gets the total.
__device__ __forceinline__ float block_sum(float v, float* red) {
  red[threadIdx.x] = v;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s /= 2) {
    if (static_cast<int>(threadIdx.x) < s) red[threadIdx.x] += red[threadIdx.x + s];
    __syncthreads();
  }
  const float total = red[0];
  __syncthreads();
  return total;
}

__device__ __forceinline__ float block_max(float v, float* red) {
  red[threadIdx.x] = v;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s /= 2) {
    if (static_cast<int>(threadIdx.x) < s)
      red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + s]);
    __syncthreads();
  }
  const float total = red[0];
  __syncthreads();
  return total;
}

__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

}  // namespace steermoe::kernels::cuda::detail
