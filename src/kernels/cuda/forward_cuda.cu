// The forward-pass kernels (see forward_cuda.hpp). Fixed-order reductions only.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/forward_cuda.hpp"

namespace steermoe::kernels::cuda {
namespace {

using detail::as_stream;
using detail::block_max;
using detail::block_sum;
using detail::blocks;
using detail::kThreads;
using detail::kWarp;
using detail::last_error;
using detail::warp_sum;

constexpr int kRowsPerBlock = 8;  // one warp per output row

__device__ __forceinline__ float load_w(const void* w, WType t, int64_t i) {
  switch (t) {
    case WType::kBF16:
      return __uint_as_float(static_cast<uint32_t>(static_cast<const uint16_t*>(w)[i]) << 16);
    case WType::kF16:
      return __half2float(static_cast<const __half*>(w)[i]);
    default:
      return static_cast<const float*>(w)[i];
  }
}

// Lane-partial dot product of row `row` with x, lanes over fixed strides of 32 columns.
__device__ __forceinline__ float row_dot(const void* w, WType t, int64_t row_start, const float* x,
                                         int cols, int lane) {
  float s = 0.0f;
  for (int c = lane; c < cols; c += kWarp) s = fmaf(load_w(w, t, row_start + c), x[c], s);
  return warp_sum(s);
}

__global__ void matmul_kernel(DMatrix w, const float* __restrict__ x, int64_t xs,
                              float* __restrict__ y, int64_t ys, float scale, bool acc) {
  const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  const int t = blockIdx.y;
  if (row >= w.rows) return;
  const int64_t stride = w.stride == 0 ? w.cols : w.stride;
  const float total = row_dot(w.data, w.dtype, row * stride, x + t * xs, w.cols, lane);
  if (lane == 0) {
    float* out = y + t * ys + row;
    *out = acc ? *out + scale * total : scale * total;
  }
}

__global__ void rmsnorm_kernel(const float* x, int64_t is, const float* __restrict__ w, float* out,
                               int64_t os, int dim, float eps) {
  __shared__ float red[kThreads];
  const float* xr = x + blockIdx.x * is;
  float* orow = out + blockIdx.x * os;
  float ss = 0.0f;
  for (int i = threadIdx.x; i < dim; i += kThreads) ss = fmaf(xr[i], xr[i], ss);
  const float total = block_sum(ss, red);
  const float inv = rsqrtf(total / static_cast<float>(dim) + eps);
  for (int i = threadIdx.x; i < dim; i += kThreads)
    orow[i] = xr[i] * inv * (w != nullptr ? w[i] : 1.0f);
}

__global__ void rope_kernel(float* x, int64_t ts, int heads, int64_t hs, int rot_offset, int rot,
                            int pos0, float theta, bool interleaved, const float* inv_freq,
                            float factor) {
  const int half = rot / 2;
  const int t = blockIdx.y;
  const int idx = blockIdx.x * blockDim.x + threadIdx.x;  // over heads * half
  if (idx >= heads * half) return;
  const int h = idx / half;
  const int i = idx % half;
  const float freq = inv_freq != nullptr
                         ? inv_freq[i]
                         : powf(theta, -2.0f * static_cast<float>(i) / static_cast<float>(rot));
  const float angle = static_cast<float>(pos0 + t) * freq;
  const float c = cosf(angle) * factor;
  const float s = sinf(angle) * factor;
  float* v = x + t * ts + h * hs + rot_offset;
  const int i0 = interleaved ? 2 * i : i;
  const int i1 = interleaved ? 2 * i + 1 : i + half;
  const float x0 = v[i0];
  const float x1 = v[i1];
  v[i0] = x0 * c - x1 * s;
  v[i1] = x0 * s + x1 * c;
}

// One block per (head, query): scores, fixed-tree max and sum, then each output element summed
// over positions in order.
__global__ void attention_kernel(const float* __restrict__ q, const float* __restrict__ kc,
                                 const float* __restrict__ vc, float* __restrict__ out,
                                 float* __restrict__ scratch, int max_pos, int pos0,
                                 AttentionShape sh) {
  __shared__ float red[kThreads];
  const int h = blockIdx.x;
  const int t = blockIdx.y;
  const int n_pos = pos0 + t + 1;
  const int group = sh.heads / sh.kv_heads;
  const int kvh = h / group;
  const int64_t qhs = sh.q_head_stride == 0 ? sh.dk : sh.q_head_stride;
  const int64_t kps = sh.k_pos_stride == 0 ? static_cast<int64_t>(sh.kv_heads) * sh.dk
                                           : sh.k_pos_stride;
  const int64_t vps = sh.v_pos_stride == 0 ? static_cast<int64_t>(sh.kv_heads) * sh.dv
                                           : sh.v_pos_stride;
  const float* qh = q + (static_cast<int64_t>(t) * sh.heads + h) * qhs;
  float* sc = scratch + (static_cast<int64_t>(t) * sh.heads + h) * max_pos;
  float local_max = -INFINITY;
  for (int p = threadIdx.x; p < n_pos; p += kThreads) {
    const float* kp = kc + p * kps + static_cast<int64_t>(kvh) * sh.dk;
    float d = 0.0f;
    for (int i = 0; i < sh.dk; ++i) d = fmaf(qh[i], kp[i], d);
    d *= sh.scale;
    sc[p] = d;
    local_max = fmaxf(local_max, d);
  }
  const float m = block_max(local_max, red);
  float local_sum = 0.0f;
  for (int p = threadIdx.x; p < n_pos; p += kThreads) {
    const float e = expf(sc[p] - m);
    sc[p] = e;
    local_sum += e;
  }
  const float inv = 1.0f / block_sum(local_sum, red);  // block_sum synchronises: sc is visible
  float* oh = out + (static_cast<int64_t>(t) * sh.heads + h) * sh.dv;
  for (int d = threadIdx.x; d < sh.dv; d += kThreads) {
    const float* vp = vc + static_cast<int64_t>(kvh) * sh.dv + d;
    float acc = 0.0f;
    for (int p = 0; p < n_pos; ++p) acc = fmaf(sc[p], vp[p * vps], acc);
    oh[d] = acc * inv;
  }
}

__global__ void swiglu_kernel(const float* gate, const float* up, float* out, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) {
    const float g = gate[i];
    out[i] = g / (1.0f + expf(-g)) * up[i];
  }
}

__global__ void add_kernel(const float* a, const float* b, float* out, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a[i] + b[i];
}

__global__ void mla_scatter_kernel(const float* __restrict__ kvb, const float* __restrict__ k_rot,
                                   int64_t rot_stride, float* __restrict__ kc,
                                   float* __restrict__ vc, int pos0, int heads, int nope,
                                   int rope_dim, int dv) {
  const int t = blockIdx.y;
  const int h = blockIdx.x;
  const int qk = nope + rope_dim;
  const float* src = kvb + (static_cast<int64_t>(t) * heads + h) * (nope + dv);
  float* krow = kc + static_cast<int64_t>(pos0 + t) * heads * qk + static_cast<int64_t>(h) * qk;
  float* vrow = vc + static_cast<int64_t>(pos0 + t) * heads * dv + static_cast<int64_t>(h) * dv;
  const float* rot = k_rot + t * rot_stride;
  for (int i = threadIdx.x; i < nope; i += blockDim.x) krow[i] = src[i];
  for (int i = threadIdx.x; i < rope_dim; i += blockDim.x) krow[nope + i] = rot[i];
  for (int i = threadIdx.x; i < dv; i += blockDim.x) vrow[i] = src[nope + i];
}

// grid (ceil(ffn / 8), k): row i of expert blockIdx.y.
__global__ void moe_gate_up_kernel(const MoeExpert* __restrict__ ex, WType t, int hidden, int ffn,
                                   const float* __restrict__ x, float* __restrict__ h) {
  const int i = blockIdx.x * kRowsPerBlock + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  const int e = blockIdx.y;
  if (i >= ffn) return;
  const int64_t start = static_cast<int64_t>(i) * hidden;
  const float g = row_dot(ex[e].gate, t, start, x, hidden, lane);
  const float u = row_dot(ex[e].up, t, start, x, hidden, lane);
  if (lane == 0) h[static_cast<int64_t>(e) * ffn + i] = g / (1.0f + expf(-g)) * u;
}

// grid ceil(hidden / 8): output row r summed over the k experts in order.
__global__ void moe_down_kernel(const MoeExpert* __restrict__ ex, int k, WType t, int hidden,
                                int ffn, const float* __restrict__ h, float* __restrict__ out,
                                bool acc) {
  const int r = blockIdx.x * kRowsPerBlock + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (r >= hidden) return;
  float total = acc ? out[r] : 0.0f;
  for (int e = 0; e < k; ++e) {
    const float d =
        row_dot(ex[e].down, t, static_cast<int64_t>(r) * ffn, h + static_cast<int64_t>(e) * ffn,
                ffn, lane);
    total = fmaf(ex[e].weight, d, total);
  }
  if (lane == 0) out[r] = total;
}

}  // namespace

int matmul(const DMatrix& w, const float* x, int64_t x_stride, float* y, int64_t y_stride, int n,
           float scale, bool accumulate, void* stream) {
  if (w.rows <= 0 || n <= 0) return 0;
  const dim3 grid(blocks(w.rows, kRowsPerBlock), static_cast<unsigned>(n));
  matmul_kernel<<<grid, kRowsPerBlock * kWarp, 0, as_stream(stream)>>>(
      w, x, x_stride == 0 ? w.cols : x_stride, y, y_stride == 0 ? w.rows : y_stride, scale,
      accumulate);
  return last_error();
}

int rmsnorm_rows(const float* x, int64_t in_stride, const float* w, float* out,
                 int64_t out_stride, int rows, int dim, float eps, void* stream) {
  if (rows <= 0) return 0;
  rmsnorm_kernel<<<static_cast<unsigned>(rows), kThreads, 0, as_stream(stream)>>>(
      x, in_stride == 0 ? dim : in_stride, w, out, out_stride == 0 ? dim : out_stride, dim, eps);
  return last_error();
}

int rope(float* x, int n, int64_t token_stride, int heads, int64_t head_stride, int rot_offset,
         int rot_dim, int pos0, float theta, bool interleaved, void* stream) {
  return rope_scaled(x, n, token_stride, heads, head_stride, rot_offset, rot_dim, pos0, theta,
                     interleaved, nullptr, 1.0f, stream);
}

int rope_scaled(float* x, int n, int64_t token_stride, int heads, int64_t head_stride,
                int rot_offset, int rot_dim, int pos0, float theta, bool interleaved,
                const float* inv_freq, float attention_factor, void* stream) {
  if (n <= 0 || heads <= 0 || rot_dim < 2) return 0;
  const dim3 grid(blocks(static_cast<int64_t>(heads) * (rot_dim / 2), kThreads),
                  static_cast<unsigned>(n));
  rope_kernel<<<grid, kThreads, 0, as_stream(stream)>>>(x, token_stride, heads, head_stride,
                                                        rot_offset, rot_dim, pos0, theta,
                                                        interleaved, inv_freq, attention_factor);
  return last_error();
}

int attention(const float* q, const float* k_cache, const float* v_cache, float* out,
              float* scratch, int max_pos, int n, int pos0, const AttentionShape& shape,
              void* stream) {
  if (n <= 0) return 0;
  if (pos0 + n > max_pos || shape.kv_heads <= 0 || shape.heads % shape.kv_heads != 0)
    return static_cast<int>(cudaErrorInvalidValue);
  const dim3 grid(static_cast<unsigned>(shape.heads), static_cast<unsigned>(n));
  attention_kernel<<<grid, kThreads, 0, as_stream(stream)>>>(q, k_cache, v_cache, out, scratch,
                                                             max_pos, pos0, shape);
  return last_error();
}

int swiglu(const float* gate, const float* up, float* out, int64_t n, void* stream) {
  if (n <= 0) return 0;
  swiglu_kernel<<<blocks(n, kThreads), kThreads, 0, as_stream(stream)>>>(gate, up, out, n);
  return last_error();
}

int add(const float* a, const float* b, float* out, int64_t n, void* stream) {
  if (n <= 0) return 0;
  add_kernel<<<blocks(n, kThreads), kThreads, 0, as_stream(stream)>>>(a, b, out, n);
  return last_error();
}

int mla_scatter_kv(const float* kvb, const float* k_rot, int64_t rot_stride, float* k_cache,
                   float* v_cache, int n, int pos0, int heads, int nope, int rope_dim, int dv,
                   void* stream) {
  if (n <= 0) return 0;
  const dim3 grid(static_cast<unsigned>(heads), static_cast<unsigned>(n));
  mla_scatter_kernel<<<grid, 128, 0, as_stream(stream)>>>(kvb, k_rot, rot_stride, k_cache,
                                                          v_cache, pos0, heads, nope, rope_dim,
                                                          dv);
  return last_error();
}

int moe_fused(const MoeExpert* experts, int k, WType dtype, int hidden, int ffn, const float* x,
              float* h, float* out, bool accumulate, void* stream) {
  if (k <= 0) {
    if (!accumulate) return static_cast<int>(cudaMemsetAsync(out, 0, sizeof(float) * hidden,
                                                             as_stream(stream)));
    return 0;
  }
  const dim3 grid(blocks(ffn, kRowsPerBlock), static_cast<unsigned>(k));
  moe_gate_up_kernel<<<grid, kRowsPerBlock * kWarp, 0, as_stream(stream)>>>(experts, dtype,
                                                                           hidden, ffn, x, h);
  const int err = last_error();
  if (err != 0) return err;
  moe_down_kernel<<<blocks(hidden, kRowsPerBlock), kRowsPerBlock * kWarp, 0, as_stream(stream)>>>(
      experts, k, dtype, hidden, ffn, h, out, accumulate);
  return last_error();
}

}  // namespace steermoe::kernels::cuda
