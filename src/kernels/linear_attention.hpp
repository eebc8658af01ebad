// Kernels of Gated DeltaNet (linear attention) layers, one token at a time (Qwen3-Next,
// Qwen3.5 / 3.6 MoE), fp32 throughout, as transformers' torch recurrent reference computes them.
//
// The free functions below run the active Isa's implementation (kernels.hpp: active_kernels(),
// set by set_active_isa() / STEERMOE_KERNELS, default best_isa()); each KernelTable holds its
// Isa's versions. The scalar ones are the references, callable by name as `reference::...` (the
// kScalar table points at them): fixed ascending order, a separate rounding per operation,
// std::exp. The SIMD versions (AVX2 + FMA and AVX-512F, written once in simd_generic.inc) change
// the summation order and use FMA and a polynomial exp, so they differ from the references by
// f32 rounding:
//   - deterministic per Isa: results depend only on the inputs and sizes, never on threads,
//     timing or alignment (single-threaded kernels, fixed order, fixed lane trees), so decode,
//     batched prefill and repeated runs give the same bits on one Isa;
//   - conv1d_silu_step: the per-channel sums and the new state equal the reference bit for bit;
//     SiLU differs by the polynomial exp (a few ulp);
//   - l2norm, rmsnorm_gated: squares summed in lanes then a fixed tree (relative ~n/2 ulp on the
//     norm), SiLU as above;
//   - delta_rule_step: the reference's per-element formula and ascending order over the key dim,
//     one FMA per term (m, the rank-1 update, out); within 2e-6 * (1 + |reference|) of the
//     reference in out and in the state over 12 steps with the state carried across (measured
//     ~1 ulp; tests/kernels/test_linear_attention.cpp).
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
// out must not alias state, q, k or v. The SIMD versions take S in column blocks small enough
// for L1 (a few vectors of each row), doing all of the step on a block before the next, so S is
// read from memory once and written once per step.
void delta_rule_step(float* state, const float* q, const float* k, const float* v, float g,
                     float beta, size_t dk, size_t dv, float* out);

// Gated RMSNorm (RMSNormGated, norm before gate): out = w * (x / sqrt(mean(x^2) + eps)) *
// silu(z). out may alias x.
void rmsnorm_gated(const float* x, const float* w, const float* z, float* out, size_t n, float eps);

// softplus(x) = log(1 + exp(x)), x for x > 20 (torch's threshold). Scalar (one per head).
float softplus(float x);

// The scalar references (the kScalar table's entries): the same contracts as above, fixed
// ascending order, no FMA, std::exp.
namespace reference {
void conv1d_silu_step(float* state, const float* x, const float* w, size_t channels, size_t k,
                      float* out);
void l2norm(float* x, size_t n, float eps);
void delta_rule_step(float* state, const float* q, const float* k, const float* v, float g,
                     float beta, size_t dk, size_t dv, float* out);
void rmsnorm_gated(const float* x, const float* w, const float* z, float* out, size_t n, float eps);
}  // namespace reference

}  // namespace steermoe::kernels
