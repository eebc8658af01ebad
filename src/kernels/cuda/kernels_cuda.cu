// BF16 matvec and SwiGLU on the GPU. One warp per output row: decode is bandwidth-bound, and a
// warp reading 16-byte vectors of a row keeps loads coalesced; no atomics, so sums are ordered.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "kernels/cuda/kernels_cuda.hpp"

namespace steermoe::kernels::cuda {
namespace {

constexpr int kWarp = 32;
constexpr int kWarpsPerBlock = 8;
constexpr int kVector = 8;  // bf16 per 16-byte load

__device__ __forceinline__ float bf16_bits_to_float(uint16_t bits) {
  return __uint_as_float(static_cast<uint32_t>(bits) << 16);
}

// Lane-partial dot product of one bf16 row with x: vector loads when the row and x are 16-byte
// aligned and cols is a multiple of 8, otherwise element by element. Fixed order per lane.
__device__ float row_dot_partial(const uint16_t* row, const float* x, int cols, int lane) {
  float sum = 0.0f;
  const bool vectorizable = (cols % kVector == 0) &&
                            (reinterpret_cast<uintptr_t>(row) % 16 == 0) &&
                            (reinterpret_cast<uintptr_t>(x) % 16 == 0);
  if (vectorizable) {
    for (int c = lane * kVector; c < cols; c += kWarp * kVector) {
      const uint4 packed = __ldg(reinterpret_cast<const uint4*>(row + c));
      const float4 x0 = __ldg(reinterpret_cast<const float4*>(x + c));
      const float4 x1 = __ldg(reinterpret_cast<const float4*>(x + c + 4));
      const uint32_t words[4] = {packed.x, packed.y, packed.z, packed.w};
      const float xs[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        sum = fmaf(__uint_as_float(words[i] << 16), xs[2 * i], sum);
        sum = fmaf(__uint_as_float(words[i] & 0xffff0000u), xs[2 * i + 1], sum);
      }
    }
  } else {
    for (int c = lane; c < cols; c += kWarp) sum = fmaf(bf16_bits_to_float(row[c]), x[c], sum);
  }
  return sum;
}

// Butterfly over the warp: every lane ends with the same, order-fixed total.
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__device__ __forceinline__ float silu(float g) { return g / (1.0f + expf(-g)); }

__global__ void matvec_bf16_kernel(const uint16_t* __restrict__ w, const float* __restrict__ x,
                                   float* __restrict__ y, int rows, int cols, float scale,
                                   bool accumulate) {
  const int row = blockIdx.x * kWarpsPerBlock + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (row >= rows) return;
  const float total = warp_sum(row_dot_partial(w + static_cast<size_t>(row) * cols, x, cols, lane));
  if (lane == 0) y[row] = accumulate ? y[row] + scale * total : scale * total;
}

__global__ void swiglu_kernel(const float* __restrict__ gate, const float* __restrict__ up,
                              float* __restrict__ out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = silu(gate[i]) * up[i];
}

__global__ void gate_up_swiglu_kernel(const uint16_t* __restrict__ w, const float* __restrict__ x,
                                      float* __restrict__ out, int inter, int cols) {
  const int i = blockIdx.x * kWarpsPerBlock + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (i >= inter) return;
  const float g = warp_sum(row_dot_partial(w + static_cast<size_t>(i) * cols, x, cols, lane));
  const float u =
      warp_sum(row_dot_partial(w + static_cast<size_t>(inter + i) * cols, x, cols, lane));
  if (lane == 0) out[i] = silu(g) * u;
}

int blocks_for_rows(int rows) { return (rows + kWarpsPerBlock - 1) / kWarpsPerBlock; }

}  // namespace

int matvec_bf16(const uint16_t* w, const float* x, float* y, int rows, int cols, float scale,
                bool accumulate, void* stream) {
  if (rows <= 0) return 0;
  matvec_bf16_kernel<<<blocks_for_rows(rows), kWarpsPerBlock * kWarp, 0,
                       static_cast<cudaStream_t>(stream)>>>(w, x, y, rows, cols, scale,
                                                            accumulate);
  return static_cast<int>(cudaGetLastError());
}

int swiglu(const float* gate, const float* up, float* out, int n, void* stream) {
  if (n <= 0) return 0;
  constexpr int kThreads = 256;
  swiglu_kernel<<<(n + kThreads - 1) / kThreads, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      gate, up, out, n);
  return static_cast<int>(cudaGetLastError());
}

int gate_up_swiglu_bf16(const uint16_t* w_gate_up, const float* x, float* out, int inter,
                        int cols, void* stream) {
  if (inter <= 0) return 0;
  gate_up_swiglu_kernel<<<blocks_for_rows(inter), kWarpsPerBlock * kWarp, 0,
                          static_cast<cudaStream_t>(stream)>>>(w_gate_up, x, out, inter, cols);
  return static_cast<int>(cudaGetLastError());
}

const char* error_string(int code) { return cudaGetErrorString(static_cast<cudaError_t>(code)); }

}  // namespace steermoe::kernels::cuda
