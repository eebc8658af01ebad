#include "kernels/linear_attention.hpp"

#include <algorithm>
#include <cmath>

#include "kernels/kernels.hpp"

namespace steermoe::kernels {

// ---- The active Isa's implementation (the selection is kernels.hpp's active_kernels()) --------

void conv1d_silu_step(float* state, const float* x, const float* w, size_t channels, size_t k,
                      float* out) {
  active_kernels().conv1d_silu_step(state, x, w, channels, k, out);
}

void l2norm(float* x, size_t n, float eps) {
  active_kernels().l2norm(x, n, eps);
}

void delta_rule_step(float* state, const float* q, const float* k, const float* v, float g,
                     float beta, size_t dk, size_t dv, float* out) {
  active_kernels().delta_rule_step(state, q, k, v, g, beta, dk, dv, out);
}

void rmsnorm_gated(const float* x, const float* w, const float* z, float* out, size_t n,
                   float eps) {
  active_kernels().rmsnorm_gated(x, w, z, out, n, eps);
}

float softplus(float x) {
  return x > 20.0f ? x : std::log1p(std::exp(x));
}

// ---- Scalar references --------------------------------------------------------------------------

namespace reference {

namespace {
float silu(float x) {
  return x / (1.0f + std::exp(-x));
}
}  // namespace

void conv1d_silu_step(float* state, const float* x, const float* w, size_t channels, size_t k,
                      float* out) {
  const size_t m = k - 1;  // state width
  for (size_t c = 0; c < channels; ++c) {
    float* st = state + c * m;
    const float* wc = w + c * k;
    const float xc = x[c];
    float acc = 0.0f;
    for (size_t j = 0; j < m; ++j) acc += wc[j] * st[j];
    acc += wc[m] * xc;
    for (size_t j = 0; j + 1 < m; ++j) st[j] = st[j + 1];
    if (m > 0) st[m - 1] = xc;
    out[c] = silu(acc);
  }
}

void l2norm(float* x, size_t n, float eps) {
  float sum = 0.0f;
  for (size_t i = 0; i < n; ++i) sum += x[i] * x[i];
  const float inv = 1.0f / std::sqrt(sum + eps);
  for (size_t i = 0; i < n; ++i) x[i] *= inv;
}

void delta_rule_step(float* state, const float* q, const float* k, const float* v, float g,
                     float beta, size_t dk, size_t dv, float* out) {
  // Two passes over S, rows outermost so the inner loops run over contiguous value dims; every
  // m[j] and out[j] is still summed over the key dim in ascending order.
  const float decay = std::exp(g);
  float* m = out;  // out holds m, then d, then the result
  for (size_t j = 0; j < dv; ++j) m[j] = 0.0f;
  for (size_t i = 0; i < dk; ++i) {
    float* row = state + i * dv;
    const float ki = k[i];
    for (size_t j = 0; j < dv; ++j) {
      row[j] *= decay;
      m[j] += row[j] * ki;
    }
  }
  for (size_t j = 0; j < dv; ++j) out[j] = (v[j] - m[j]) * beta;  // d
  // S += k d^T and out = S^T q in one pass; d is copied first because out is overwritten.
  constexpr size_t kChunk = 256;
  float d[kChunk];
  float acc[kChunk];
  for (size_t j0 = 0; j0 < dv; j0 += kChunk) {
    const size_t n = std::min(kChunk, dv - j0);
    for (size_t j = 0; j < n; ++j) {
      d[j] = out[j0 + j];
      acc[j] = 0.0f;
    }
    for (size_t i = 0; i < dk; ++i) {
      float* row = state + i * dv + j0;
      const float ki = k[i];
      const float qi = q[i];
      for (size_t j = 0; j < n; ++j) {
        row[j] += ki * d[j];
        acc[j] += row[j] * qi;
      }
    }
    for (size_t j = 0; j < n; ++j) out[j0 + j] = acc[j];
  }
}

void rmsnorm_gated(const float* x, const float* w, const float* z, float* out, size_t n,
                   float eps) {
  float sum = 0.0f;
  for (size_t i = 0; i < n; ++i) sum += x[i] * x[i];
  const float inv = 1.0f / std::sqrt(sum / static_cast<float>(n) + eps);
  for (size_t i = 0; i < n; ++i) out[i] = w[i] * (x[i] * inv) * silu(z[i]);
}

}  // namespace reference

}  // namespace steermoe::kernels
