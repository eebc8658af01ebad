// CUDA kernels for the GPU expert path: BF16 matrix-vector products and SwiGLU. Plain C++ header
// (no CUDA includes) so host code can call it without nvcc. Every pointer is a device pointer;
// `stream` is a cudaStream_t (nullptr: the default stream). Functions return 0 on success or the
// cudaError_t of a failed launch (error_string() turns it into text).
//
// Reductions run in a fixed order (each row by one warp, lanes over fixed column strides, then a
// butterfly over the warp), so results are reproducible run to run for the same sizes.
#pragma once

#include <cstdint>

namespace steermoe::kernels::cuda {

// y[r] = scale * sum_c W[r][c] * x[c] (+ y[r] when accumulate); W is bf16 row-major
// [rows][cols], x and y f32.
int matvec_bf16(const uint16_t* w, const float* x, float* y, int rows, int cols, float scale,
                bool accumulate, void* stream);

// out[i] = silu(gate[i]) * up[i].
int swiglu(const float* gate, const float* up, float* out, int n, void* stream);

// The first half of an expert: w_gate_up is the fused bf16 [2 * inter][cols] (gate rows first,
// then up rows, as transformers stores gate_up_proj); out[i] = silu(gate_i . x) * (up_i . x).
int gate_up_swiglu_bf16(const uint16_t* w_gate_up, const float* x, float* out, int inter, int cols,
                        void* stream);

const char* error_string(int code);

}  // namespace steermoe::kernels::cuda
