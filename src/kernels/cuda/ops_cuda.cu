// The element-wise, copy and Gated DeltaNet kernels of the GPU op set (see forward_cuda.hpp).
// Fixed-order reductions only: no float atomics.
#include <cuda_runtime.h>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/forward_cuda.hpp"

namespace steermoe::kernels::cuda {
namespace {

using detail::as_stream;
using detail::block_sum;
using detail::blocks;
using detail::kThreads;
using detail::last_error;
using detail::sigmoid;

__global__ void clamp_kernel(float* x, int64_t n, float limit) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] = fminf(fmaxf(x[i], -limit), limit);
}

__global__ void sigmoid_mul_kernel(float* x, const float* gate, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= sigmoid(gate[i]);
}

// One block per row: the dot product as a fixed tree, then the row scaled.
__global__ void sigmoid_dot_scale_kernel(float* x, const float* __restrict__ a,
                                         const float* __restrict__ w, int dim) {
  __shared__ float red[kThreads];
  const int64_t row = static_cast<int64_t>(blockIdx.x) * dim;
  float partial = 0.0f;
  for (int i = threadIdx.x; i < dim; i += kThreads) partial = fmaf(w[i], a[row + i], partial);
  const float s = sigmoid(block_sum(partial, red));
  for (int i = threadIdx.x; i < dim; i += kThreads) x[row + i] *= s;
}

__global__ void copy_kernel(const float* __restrict__ src, float* __restrict__ dst, CopyShape c,
                            int64_t total) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += stride) {
    const int64_t col = i % c.cols;
    const int64_t row = (i / c.cols) % c.rows;
    const int64_t o = i / (static_cast<int64_t>(c.cols) * c.rows);
    dst[o * c.dst_outer + row * c.dst_row + col] = src[o * c.src_outer + row * c.src_row + col];
  }
}

// Causal depthwise conv + SiLU: one thread per channel, the n tokens in order (the rolling state
// is per channel).
__global__ void conv_silu_kernel(float* state, float* qkv, const float* __restrict__ w,
                                 int channels, int k, int n) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= channels) return;
  const int m = k - 1;
  float* st = state + static_cast<int64_t>(c) * m;
  const float* wc = w + static_cast<int64_t>(c) * k;
  for (int t = 0; t < n; ++t) {
    float* x = qkv + static_cast<int64_t>(t) * channels + c;
    const float xc = *x;
    float acc = 0.0f;
    for (int j = 0; j < m; ++j) acc += wc[j] * st[j];
    acc += wc[m] * xc;
    for (int j = 0; j + 1 < m; ++j) st[j] = st[j + 1];
    if (m > 0) st[m - 1] = xc;
    *x = acc * sigmoid(acc);
  }
}

// q and k of key head blockIdx.x, token blockIdx.y: L2-normalised (eps 1e-6), q / sqrt(dk).
__global__ void qk_l2norm_kernel(float* qkv, int64_t token_stride, int key_dim, int dk) {
  __shared__ float red[kThreads];
  float* q = qkv + blockIdx.y * token_stride + static_cast<int64_t>(blockIdx.x) * dk;
  float* k = q + key_dim;
  float sq = 0.0f, sk = 0.0f;
  for (int i = threadIdx.x; i < dk; i += kThreads) {
    sq += q[i] * q[i];
    sk += k[i] * k[i];
  }
  const float inv_q = 1.0f / sqrtf(block_sum(sq, red) + 1e-6f);
  const float inv_k = 1.0f / sqrtf(block_sum(sk, red) + 1e-6f);
  const float sqrt_dk = sqrtf(static_cast<float>(dk));
  for (int i = threadIdx.x; i < dk; i += kThreads) {
    q[i] = q[i] * inv_q / sqrt_dk;
    k[i] *= inv_k;
  }
}

__device__ float softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

// Value head blockIdx.x over the n tokens in order. Thread j owns value columns j, j + kThreads,
// ... of the state S [dk][dv]: S *= exp(g); m = S^T k; d = (v - m) beta; S += k d^T; o = S^T q,
// each sum over the key dim in ascending order; then the gated RMSNorm of o (a block sum).
__global__ void delta_rule_kernel(DeltaRuleArgs args, int n, DeltaRuleShape sh) {
  __shared__ float red[kThreads];
  const int h = blockIdx.x;
  const int nk = sh.k_heads, nv = sh.v_heads, dk = sh.dk, dv = sh.dv;
  const int kh = sh.v_heads_tiled ? h % nk : h / (nv / nk);
  const int64_t key_dim = static_cast<int64_t>(nk) * dk;
  const int64_t conv_dim = 2 * key_dim + static_cast<int64_t>(nv) * dv;
  float* S = args.recurrent + static_cast<int64_t>(h) * dk * dv;
  for (int t = 0; t < n; ++t) {
    const float* row = args.qkv + t * conv_dim;
    const float* q = row + static_cast<int64_t>(kh) * dk;
    const float* k = row + key_dim + static_cast<int64_t>(kh) * dk;
    const float* v = row + 2 * key_dim + static_cast<int64_t>(h) * dv;
    const float beta = sigmoid(args.b[t * nv + h]);
    const float decay = expf(args.a_neg[h] * softplus(args.a[t * nv + h] + args.dt_bias[h]));
    float* o = args.core + static_cast<int64_t>(t) * nv * dv + static_cast<int64_t>(h) * dv;
    const float* z = args.z + static_cast<int64_t>(t) * nv * dv + static_cast<int64_t>(h) * dv;
    float ss = 0.0f;
    for (int j = threadIdx.x; j < dv; j += kThreads) {
      float m = 0.0f;
      for (int i = 0; i < dk; ++i) {
        S[i * dv + j] *= decay;
        m += S[i * dv + j] * k[i];
      }
      const float d = (v[j] - m) * beta;
      float acc = 0.0f;
      for (int i = 0; i < dk; ++i) {
        S[i * dv + j] += k[i] * d;
        acc += S[i * dv + j] * q[i];
      }
      o[j] = acc;
      ss += acc * acc;
    }
    const float inv = 1.0f / sqrtf(block_sum(ss, red) / static_cast<float>(dv) + sh.eps);
    for (int j = threadIdx.x; j < dv; j += kThreads)
      o[j] = args.norm_w[j] * (o[j] * inv) * (z[j] * sigmoid(z[j]));
  }
}

}  // namespace

int clamp(float* x, int64_t n, float limit, void* stream) {
  if (n <= 0) return 0;
  clamp_kernel<<<blocks(n, kThreads), kThreads, 0, as_stream(stream)>>>(x, n, limit);
  return last_error();
}

int sigmoid_mul(float* x, const float* gate, int64_t n, void* stream) {
  if (n <= 0) return 0;
  sigmoid_mul_kernel<<<blocks(n, kThreads), kThreads, 0, as_stream(stream)>>>(x, gate, n);
  return last_error();
}

int sigmoid_dot_scale(float* x, const float* a, const float* w, int rows, int dim, void* stream) {
  if (rows <= 0 || dim <= 0) return 0;
  sigmoid_dot_scale_kernel<<<static_cast<unsigned>(rows), kThreads, 0, as_stream(stream)>>>(
      x, a, w, dim);
  return last_error();
}

int copy(const float* src, float* dst, const CopyShape& shape, void* stream) {
  const int64_t total = static_cast<int64_t>(shape.outer) * shape.rows * shape.cols;
  if (total <= 0) return 0;
  const unsigned grid = blocks(total, kThreads) < 65535u ? blocks(total, kThreads) : 65535u;
  copy_kernel<<<grid, kThreads, 0, as_stream(stream)>>>(src, dst, shape, total);
  return last_error();
}

int gated_delta_rule(const DeltaRuleArgs& args, int n, const DeltaRuleShape& sh, void* stream) {
  if (n <= 0) return 0;
  if (sh.k_heads <= 0 || sh.v_heads % sh.k_heads != 0 || sh.conv_kernel < 1)
    return static_cast<int>(cudaErrorInvalidValue);
  const int key_dim = sh.k_heads * sh.dk;
  const int conv_dim = 2 * key_dim + sh.v_heads * sh.dv;
  cudaStream_t s = as_stream(stream);
  conv_silu_kernel<<<blocks(conv_dim, kThreads), kThreads, 0, s>>>(
      args.conv_state, args.qkv, args.conv_w, conv_dim, sh.conv_kernel, n);
  if (const int err = last_error(); err != 0) return err;
  const dim3 norm_grid(static_cast<unsigned>(sh.k_heads), static_cast<unsigned>(n));
  qk_l2norm_kernel<<<norm_grid, kThreads, 0, s>>>(args.qkv, conv_dim, key_dim, sh.dk);
  if (const int err = last_error(); err != 0) return err;
  delta_rule_kernel<<<static_cast<unsigned>(sh.v_heads), kThreads, 0, s>>>(args, n, sh);
  return last_error();
}

}  // namespace steermoe::kernels::cuda
