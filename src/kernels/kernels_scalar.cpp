// Scalar reference implementations: plain loops in natural order. They define what every SIMD
// path computes (up to rounding) and run on any CPU.
#include <cmath>
#include <cstring>

#include "common/error.hpp"
#include "kernels/kernels_internal.hpp"
#include "kernels/linear_attention.hpp"
#include "kernels/quant_internal.hpp"

namespace steermoe::kernels::detail {
namespace {

float weight_at(const Matrix& w, size_t row, size_t col) {
  const size_t i = row * w.stride() + col;
  switch (w.dtype) {
    case DType::kF32:
      return static_cast<const float*>(w.data)[i];
    case DType::kBF16:
      return bf16_to_f32(static_cast<const uint16_t*>(w.data)[i]);
    case DType::kF16:
      return f16_to_f32(static_cast<const uint16_t*>(w.data)[i]);
    default:
      SM_ASSERT_MSG(false, "weight_at of a quantized matrix");
  }
  return 0.0f;
}

float row_dot(const Matrix& w, size_t row, const float* x) {
  float sum = 0.0f;
  for (size_t c = 0; c < w.cols; ++c) sum += weight_at(w, row, c) * x[c];
  return sum;
}

void finish(float* out, float sum, const MatvecParams& p) {
  *out = p.accumulate ? *out + p.scale * sum : p.scale * sum;
}

void matvec_rows(const Matrix& w, const float* x, float* y, size_t row_begin, size_t row_end,
                 const MatvecParams& p) {
  if (is_quant(w.dtype)) {
    return quant_matmul_rows(scalar_quant_ops(), w, x, w.cols, 1, y, 0, row_begin, row_begin,
                             row_end, p);
  }
  for (size_t r = row_begin; r < row_end; ++r) finish(y + (r - row_begin), row_dot(w, r, x), p);
}

void matmul_rows(const Matrix& w, const float* x, size_t x_stride, size_t n, float* y,
                 size_t y_stride, size_t row_begin, size_t row_end, const MatvecParams& p) {
  if (is_quant(w.dtype)) {
    return quant_matmul_rows(scalar_quant_ops(), w, x, x_stride, n, y, y_stride, 0, row_begin,
                             row_end, p);
  }
  for (size_t r = row_begin; r < row_end; ++r) {
    for (size_t i = 0; i < n; ++i) finish(y + i * y_stride + r, row_dot(w, r, x + i * x_stride), p);
  }
}

float dot(const float* a, const float* b, size_t n) {
  float sum = 0.0f;
  for (size_t i = 0; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

void rmsnorm(const float* x, const float* weight, float* out, size_t n, const RmsNormParams& p) {
  float sum_sq = 0.0f;
  for (size_t i = 0; i < n; ++i) sum_sq += x[i] * x[i];
  const float inv = 1.0f / std::sqrt(sum_sq / static_cast<float>(n) + p.eps);
  for (size_t i = 0; i < n; ++i) {
    const float wi = (weight != nullptr ? weight[i] : 1.0f) + p.weight_offset;
    out[i] = x[i] * inv * wi;
  }
}

// Shared with the SIMD files through rope_angles(); the rotation itself is mul/mul/sub (and
// mul/mul/add) without FMA in every implementation, so RoPE is bit-identical across Isas.
void rope(float* x, size_t n_heads, size_t pos, const RopeParams& p) {
  const size_t rot = p.rot_dim == 0 ? p.head_dim : p.rot_dim;
  const size_t half = rot / 2;
  float cos_t[kMaxRotDim / 2];
  float sin_t[kMaxRotDim / 2];
  rope_angles(pos, rot, p, cos_t, sin_t);
  for (size_t h = 0; h < n_heads; ++h) {
    float* v = x + h * p.head_dim + p.rot_offset;
    for (size_t i = 0; i < half; ++i) {
      const size_t i0 = p.style == RopeStyle::kNeox ? i : 2 * i;
      const size_t i1 = p.style == RopeStyle::kNeox ? i + half : 2 * i + 1;
      const float x0 = v[i0];
      const float x1 = v[i1];
      v[i0] = x0 * cos_t[i] - x1 * sin_t[i];
      v[i1] = x0 * sin_t[i] + x1 * cos_t[i];
    }
  }
}

void swiglu(const float* gate, const float* up, float* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void softmax(float* x, size_t n) {
  if (n == 0) return;
  float max = x[0];
  for (size_t i = 1; i < n; ++i) max = x[i] > max ? x[i] : max;
  float sum = 0.0f;
  for (size_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - max);
    sum += x[i];
  }
  for (size_t i = 0; i < n; ++i) x[i] = x[i] / sum;
}

void axpy(float a, const float* x, float* y, size_t n) {
  for (size_t i = 0; i < n; ++i) y[i] = y[i] + a * x[i];
}

void add(const float* a, const float* b, float* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

void scale(float a, float* x, size_t n) {
  for (size_t i = 0; i < n; ++i) x[i] = a * x[i];
}

void attention_heads(const float* q, const float* k, const float* v, size_t n_pos, float* out,
                     const AttentionParams& params, size_t head_begin, size_t head_end,
                     float* scores) {
  const AttentionParams p = resolve_strides(params);
  const size_t group = p.n_heads / p.n_kv_heads;
  for (size_t h = head_begin; h < head_end; ++h) {
    const size_t g = h / group;
    const float* qh = q + h * p.q_head_stride;
    for (size_t t = 0; t < n_pos; ++t) {
      scores[t] = dot(qh, k + t * p.k_pos_stride + g * p.head_dim_k, p.head_dim_k) * p.scale;
    }
    softmax(scores, n_pos);
    float* oh = out + h * p.out_head_stride;
    std::memset(oh, 0, p.head_dim_v * sizeof(float));
    for (size_t t = 0; t < n_pos; ++t) {
      axpy(scores[t], v + t * p.v_pos_stride + g * p.head_dim_v, oh, p.head_dim_v);
    }
  }
}

}  // namespace

const KernelTable& scalar_table() {
  static const KernelTable table{
      .isa = Isa::kScalar,
      .matvec_rows = matvec_rows,
      .matmul_rows = matmul_rows,
      .rmsnorm = rmsnorm,
      .rope = rope,
      .swiglu = swiglu,
      .softmax = softmax,
      .dot = dot,
      .axpy = axpy,
      .add = add,
      .scale = scale,
      .attention_heads = attention_heads,
      .conv1d_silu_step = reference::conv1d_silu_step,
      .l2norm = reference::l2norm,
      .delta_rule_step = reference::delta_rule_step,
      .rmsnorm_gated = reference::rmsnorm_gated,
      .delta_rule_chunked = reference::delta_rule_chunked,
      .quantize_input = quantize_act_scalar,
  };
  return table;
}

}  // namespace steermoe::kernels::detail
