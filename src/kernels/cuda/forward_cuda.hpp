// CUDA kernels of the forward pass (the GPU op set, engine/cuda/cuda_ops.cpp): matrix-vector
// products over F32 / BF16 / F16 weights for n tokens, RMSNorm over rows, RoPE (NeoX and
// interleaved, partial, YaRN frequencies), causal attention over a device KV cache, SwiGLU,
// vector add, clamp, sigmoid gates, strided copies, the Gated DeltaNet recurrence, the MLA KV
// scatter and the fused MoE over the selected experts of a layer.
//
// Plain C++ header (no CUDA includes): host code calls it without nvcc. Every pointer is a
// device pointer; `stream` is a cudaStream_t (nullptr: the default stream). Functions return 0
// or the cudaError_t of the failed launch (kernels::cuda::error_string() turns it into text).
//
// Determinism: no float atomics anywhere. Every dot product is one warp per output row, lanes
// over fixed column strides, then a fixed butterfly; block reductions are fixed trees. Results
// depend only on the sizes, never on launch timing. Numerics differ from the CPU kernels (other
// summation order, device expf/cosf): tests compare against the CPU scalar reference with
// tolerances derived from the inputs.
#pragma once

#include <cstddef>
#include <cstdint>

namespace steermoe::kernels::cuda {

// Element type of a weight matrix (same numbering as kernels::DType).
enum class WType : int32_t { kF32 = 0, kBF16 = 1, kF16 = 2 };

// A row-major device matrix [rows][cols], rows `stride` elements apart.
struct DMatrix {
  const void* data = nullptr;
  WType dtype = WType::kF32;
  int32_t rows = 0;
  int32_t cols = 0;
  int64_t stride = 0;  // 0: cols
};

// Y[t][r] = scale * sum_c W[r][c] * X[t][c] (+ Y[t][r] when accumulate), t in [0, n).
// X rows x_stride floats apart, Y rows y_stride floats apart (0: cols / rows).
int matmul(const DMatrix& w, const float* x, int64_t x_stride, float* y, int64_t y_stride, int n,
           float scale, bool accumulate, void* stream);

// out[r] = x[r] * rsqrt(mean(x[r]^2) + eps) * w, rows of `dim` floats; x rows in_stride apart,
// out rows out_stride apart (0: dim); w has `dim` floats (nullptr: 1). out may alias x.
int rmsnorm_rows(const float* x, int64_t in_stride, const float* w, float* out, int64_t out_stride,
                 int rows, int dim, float eps, void* stream);

// RoPE in place on n tokens: token t (at position pos0 + t) starts at x + t * token_stride, its
// `heads` heads head_stride floats apart; elements [rot_offset, rot_offset + rot_dim) of each
// head are rotated. interleaved: pairs (2i, 2i+1), else NeoX pairs (i, i + rot_dim/2).
int rope(float* x, int n, int64_t token_stride, int heads, int64_t head_stride, int rot_offset,
         int rot_dim, int pos0, float theta, bool interleaved, void* stream);
// The same with scaled frequencies: inv_freq (device, rot_dim / 2 floats; nullptr: theta's) and
// cos / sin multiplied by attention_factor (YaRN).
int rope_scaled(float* x, int n, int64_t token_stride, int heads, int64_t head_stride,
                int rot_offset, int rot_dim, int pos0, float theta, bool interleaved,
                const float* inv_freq, float attention_factor, void* stream);

// Causal attention of n queries at positions pos0 .. pos0 + n - 1 over the cache positions
// [0, pos0 + t] of each. q: [n][heads][q_head_stride] (the first dk floats of a head used),
// k cache rows k_pos_stride floats apart ([kv_heads][dk] each), v rows v_pos_stride apart
// ([kv_heads][dv]); out [n][heads][dv]. scratch: n * heads * max_pos floats (max_pos >=
// pos0 + n).
struct AttentionShape {
  int32_t heads = 0;
  int32_t kv_heads = 0;
  int32_t dk = 0;
  int32_t dv = 0;
  int64_t q_head_stride = 0;  // 0: dk
  int64_t k_pos_stride = 0;   // 0: kv_heads * dk
  int64_t v_pos_stride = 0;   // 0: kv_heads * dv
  float scale = 1.0f;
};
int attention(const float* q, const float* k_cache, const float* v_cache, float* out,
              float* scratch, int max_pos, int n, int pos0, const AttentionShape& shape,
              void* stream);

// out[i] = silu(gate[i]) * up[i] (out may alias either).
int swiglu(const float* gate, const float* up, float* out, int64_t n, void* stream);
// out[i] = a[i] + b[i] (out may alias either).
int add(const float* a, const float* b, float* out, int64_t n, void* stream);
// x[i] = clamp(x[i], -limit, limit).
int clamp(float* x, int64_t n, float limit, void* stream);
// x[i] *= sigmoid(gate[i]).
int sigmoid_mul(float* x, const float* gate, int64_t n, void* stream);
// Row r of x (dim floats) *= sigmoid(w . row r of a); one block per row, fixed-tree sum.
int sigmoid_dot_scale(float* x, const float* a, const float* w, int rows, int dim, void* stream);
// dst[o * dst_outer + r * dst_row + c] = src[o * src_outer + r * src_row + c] (strides in
// floats; a source stride may be 0).
struct CopyShape {
  int32_t outer = 1;
  int32_t rows = 1;
  int32_t cols = 0;
  int64_t src_outer = 0;
  int64_t src_row = 0;
  int64_t dst_outer = 0;
  int64_t dst_row = 0;
};
int copy(const float* src, float* dst, const CopyShape& shape, void* stream);

// Gated DeltaNet over n tokens (the formulas of kernels/linear_attention.hpp): per channel the
// causal conv + SiLU over the rolling state conv_state [conv_dim][conv_kernel - 1], q and k
// L2-normalised per key head (eps 1e-6) and q / sqrt(dk), then per value head, token after token,
// beta = sigmoid(b), g = a_neg * softplus(a + dt_bias), the delta-rule step on recurrent
// [v_heads][dk][dv] (one thread per value column: every sum runs over the key dim in order) and
// the gated RMSNorm with norm_w and silu(z). qkv [n][2 * k_heads * dk + v_heads * dv] is
// overwritten; core [n][v_heads * dv].
struct DeltaRuleShape {
  int32_t k_heads = 0;
  int32_t v_heads = 0;
  int32_t dk = 0;
  int32_t dv = 0;
  int32_t conv_kernel = 0;
  bool v_heads_tiled = false;  // value head h reads key head h % k_heads (else h / ratio)
  float eps = 1e-6f;           // gated RMSNorm
};
struct DeltaRuleArgs {
  float* conv_state = nullptr;
  float* recurrent = nullptr;
  float* qkv = nullptr;
  const float* z = nullptr;
  const float* b = nullptr;
  const float* a = nullptr;
  const float* conv_w = nullptr;   // [conv_dim][conv_kernel]
  const float* a_neg = nullptr;    // [v_heads]
  const float* dt_bias = nullptr;  // [v_heads]
  const float* norm_w = nullptr;   // [dv]
  float* core = nullptr;
};
int gated_delta_rule(const DeltaRuleArgs& args, int n, const DeltaRuleShape& shape, void* stream);

// MLA: writes the per-head K and V rows of n tokens into the cache at positions pos0 ..:
// k row = per head [kvb[h][0..nope) | k_rot[0..rope)], v row = per head kvb[h][nope..nope+dv).
// kvb: [n][heads][nope + dv]; k_rot: token t at k_rot + t * rot_stride.
int mla_scatter_kv(const float* kvb, const float* k_rot, int64_t rot_stride, float* k_cache,
                   float* v_cache, int n, int pos0, int heads, int nope, int rope_dim, int dv,
                   void* stream);

// One selected expert of the fused MoE: device pointers of its three matrices (all of one
// dtype, rows contiguous) and its execution weight.
struct MoeExpert {
  const void* gate = nullptr;  // [ffn][hidden]
  const void* up = nullptr;    // [ffn][hidden]
  const void* down = nullptr;  // [hidden][ffn]
  float weight = 0.0f;
};

// Fused MoE of one token over `k` experts read from the device array `experts` (so the launch
// does not change with the selection, graph-capturable): h[i] = silu(gate_i x) * (up_i x)
// ([k][ffn] in `h`), then out = (accumulate ? out : 0) + sum_i weight_i * (down_i h[i]), summed
// in i order. Two launches.
int moe_fused(const MoeExpert* experts, int k, WType dtype, int hidden, int ffn, const float* x,
              float* h, float* out, bool accumulate, void* stream);

}  // namespace steermoe::kernels::cuda
