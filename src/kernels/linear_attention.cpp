#include "kernels/linear_attention.hpp"

#include <algorithm>
#include <cmath>

#include "common/error.hpp"
#include "kernels/kernels.hpp"
#include "kernels/kernels_internal.hpp"

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

void delta_rule_chunked(float* state, const float* q, const float* k, const float* v,
                        const float* g, const float* beta, float* out,
                        const DeltaRuleChunkParams& p) {
  active_kernels().delta_rule_chunked(state, q, k, v, g, beta, out, p);
}

namespace detail {
DeltaRuleChunkParams resolve_chunk_params(DeltaRuleChunkParams p) {
  SM_ASSERT_MSG(p.chunk >= 1 && p.chunk <= kMaxDeltaRuleChunk,
                "delta_rule_chunked: chunk must be in [1, kMaxDeltaRuleChunk]");
  if (p.qk_stride == 0) p.qk_stride = p.dk;
  if (p.v_stride == 0) p.v_stride = p.dv;
  if (p.out_stride == 0) p.out_stride = p.dv;
  return p;
}
}  // namespace detail

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

namespace {
// One chunk of L tokens (the header's three formulas, in that order); x and y are [L][dv]
// scratch, kk and qk [L][L].
void delta_rule_one_chunk(float* state, const float* q, const float* k, const float* v,
                          const float* g, const float* beta, float* out,
                          const DeltaRuleChunkParams& p, size_t L, double* G, float* kk, float* qk,
                          float* x, float* y) {
  const size_t dk = p.dk, dv = p.dv, qs = p.qk_stride;
  // G in double: with strongly negative gates it reaches -1e3 and more, where a float's ulp
  // (1e-4) would swamp the small differences G_t - G_s of neighbouring tokens.
  double cum = 0.0;
  for (size_t t = 0; t < L; ++t) {
    cum += g[t * p.gate_stride];
    G[t] = cum;
  }
  const auto decay = [G](size_t t, size_t s) { return std::exp(static_cast<float>(G[t] - G[s])); };
  for (size_t t = 0; t < L; ++t) {
    for (size_t s = 0; s <= t; ++s) {
      float a = 0.0f, b = 0.0f;
      for (size_t i = 0; i < dk; ++i) {
        a += k[t * qs + i] * k[s * qs + i];
        b += q[t * qs + i] * k[s * qs + i];
      }
      kk[t * L + s] = a;
      qk[t * L + s] = b;
    }
  }
  // x_t = S0^T k_t, y_t = S0^T q_t (each column summed over i ascending).
  for (size_t t = 0; t < L; ++t) {
    float* xt = x + t * dv;
    float* yt = y + t * dv;
    for (size_t j = 0; j < dv; ++j) xt[j] = yt[j] = 0.0f;
    for (size_t i = 0; i < dk; ++i) {
      const float* row = state + i * dv;
      const float ki = k[t * qs + i], qi = q[t * qs + i];
      for (size_t j = 0; j < dv; ++j) {
        xt[j] += ki * row[j];
        yt[j] += qi * row[j];
      }
    }
  }
  // d_t, in place of x_t (forward substitution: d_s for s < t is final when t is reached).
  for (size_t t = 0; t < L; ++t) {
    float* dt = x + t * dv;
    const float bt = beta[t * p.gate_stride];
    const float gamma = std::exp(static_cast<float>(G[t]));
    for (size_t j = 0; j < dv; ++j) dt[j] = bt * (v[t * p.v_stride + j] - gamma * dt[j]);
    for (size_t s = 0; s < t; ++s) {
      const float a = bt * decay(t, s) * kk[t * L + s];
      const float* ds = x + s * dv;
      for (size_t j = 0; j < dv; ++j) dt[j] -= a * ds[j];
    }
  }
  for (size_t t = 0; t < L; ++t) {
    float* ot = out + t * p.out_stride;
    const float gamma = std::exp(static_cast<float>(G[t]));
    for (size_t j = 0; j < dv; ++j) ot[j] = gamma * y[t * dv + j];
    for (size_t s = 0; s <= t; ++s) {
      const float b = decay(t, s) * qk[t * L + s];
      const float* ds = x + s * dv;
      for (size_t j = 0; j < dv; ++j) ot[j] += b * ds[j];
    }
  }
  const float gamma_last = std::exp(static_cast<float>(G[L - 1]));
  for (size_t i = 0; i < dk; ++i) {
    float* row = state + i * dv;
    for (size_t j = 0; j < dv; ++j) row[j] *= gamma_last;
    for (size_t s = 0; s < L; ++s) {
      const float c = decay(L - 1, s) * k[s * qs + i];
      const float* ds = x + s * dv;
      for (size_t j = 0; j < dv; ++j) row[j] += c * ds[j];
    }
  }
}
}  // namespace

void delta_rule_chunked(float* state, const float* q, const float* k, const float* v,
                        const float* g, const float* beta, float* out,
                        const DeltaRuleChunkParams& params) {
  const DeltaRuleChunkParams p = detail::resolve_chunk_params(params);
  if (p.n == 0) return;
  const size_t C = std::min(p.chunk, p.n);
  auto* scratch = static_cast<float*>(
      detail::thread_scratch((2 * C + 2 * C * C + 2 * C * p.dv) * sizeof(float), 3));
  auto* G = reinterpret_cast<double*>(scratch);  // the scratch is 64-byte aligned
  float* kk = scratch + 2 * C;
  float* qk = kk + C * C;
  float* x = qk + C * C;
  float* y = x + C * p.dv;
  for (size_t c0 = 0; c0 < p.n; c0 += C) {
    delta_rule_one_chunk(state, q + c0 * p.qk_stride, k + c0 * p.qk_stride, v + c0 * p.v_stride,
                         g + c0 * p.gate_stride, beta + c0 * p.gate_stride, out + c0 * p.out_stride,
                         p, std::min(C, p.n - c0), G, kk, qk, x, y);
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
