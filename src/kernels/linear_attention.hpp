// Kernels of Gated DeltaNet (linear attention) layers, one token at a time (Qwen3-Next,
// Qwen3.5 / 3.6 MoE). Scalar only for now: these are the references; no SIMD versions exist yet
// (they are a small share of a decode step next to the projections, which use matvec/matmul).
// Fixed reduction order (ascending index), fp32 throughout, as transformers' torch recurrent
// reference computes them in fp32.
#pragma once

#include <cstddef>

namespace steermoe::kernels {

// Causal depthwise conv1d of width k over channels [0, channels), one new input x[c], then SiLU:
//   out[c] = silu(sum_{j < k-1} w[c][j] * state[c][j] + w[c][k-1] * x[c])
// state [channels][k-1] holds the previous k-1 inputs of each channel, oldest first (zeros at the
// start of a sequence); it is shifted and x appended. out may alias x.
void conv1d_silu_step(float* state, const float* x, const float* w, size_t channels, size_t k,
                      float* out);

// x *= 1 / sqrt(sum(x^2) + eps) (transformers / FLA l2norm; eps 1e-6 in Gated DeltaNet).
void l2norm(float* x, size_t n, float eps);

// One gated delta-rule step of one head. S [dk][dv] (row i = key dim i), q and k [dk] (already
// L2-normalised, q already scaled by dk^-0.5), v and out [dv]:
//   S *= exp(g);  m = S^T k;  d = (v - m) * beta;  S += k d^T;  out = S^T q
void delta_rule_step(float* state, const float* q, const float* k, const float* v, float g,
                     float beta, size_t dk, size_t dv, float* out);

// Gated RMSNorm (RMSNormGated, norm before gate): out = w * (x / sqrt(mean(x^2) + eps)) *
// silu(z). out may alias x.
void rmsnorm_gated(const float* x, const float* w, const float* z, float* out, size_t n,
                   float eps);

// softplus(x) = log(1 + exp(x)), x for x > 20 (torch's threshold).
float softplus(float x);

}  // namespace steermoe::kernels
