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
//     ~1 ulp; tests/kernels/test_linear_attention.cpp);
//   - delta_rule_chunked: the same formulas as the reference, column blocks of S kept in L1,
//     pair decays by the polynomial exp, FMAs; sums over s still ascending (bounds in the tests).
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

// Sizes and strides of one value head's chunked delta-rule prefill (delta_rule_chunked).
struct DeltaRuleChunkParams {
  size_t n = 0;   // tokens
  size_t dk = 0;  // key dims (rows of the state)
  size_t dv = 0;  // value dims (columns of the state, of v and out)
  // C: the tokens [0, C), [C, 2C), ... of this call are the chunks (the last one may be shorter),
  // so the rounding depends on where the call starts; 1 <= chunk <= kMaxDeltaRuleChunk.
  size_t chunk = 64;
  size_t qk_stride = 0;    // floats from token t's q (and k) to token t + 1's; 0 = dk
  size_t v_stride = 0;     // floats from token t's v to token t + 1's; 0 = dv
  size_t out_stride = 0;   // floats from token t's out to token t + 1's; 0 = dv
  size_t gate_stride = 1;  // floats from token t's g (and beta) to token t + 1's
};
inline constexpr size_t kMaxDeltaRuleChunk = 256;

// n gated delta-rule steps of one head at once, in the chunked (WY / UT-transform) form: the same
// contract as n calls of delta_rule_step (state in and out, q_t, k_t L2-normalised, q_t scaled,
// g_t and beta_t per token, out_t = S_t^T q_t), rearranged per chunk of C tokens into products
// with the chunk's entry state S0. With G_t = g_0 + ... + g_t (within the chunk):
//   d_t = beta_t (v_t - e^{G_t} S0^T k_t) - sum_{s<t} beta_t e^{G_t - G_s} (k_t . k_s) d_s
//   out_t = e^{G_t} S0^T q_t + sum_{s<=t} e^{G_t - G_s} (q_t . k_s) d_s
//   S = e^{G_last} S0 + sum_s e^{G_last - G_s} k_s d_s^T
// (d_t is the recurrence's (v_t - m_t) beta_t; the first line is a unit lower-triangular solve).
// The recurrence's rounding is not kept: the result is within a tolerance of the token-by-token
// steps (tests/kernels/test_linear_attention.cpp), and a function of the inputs and C only.
// out must not alias state, q, k or v. Uses the calling chunk's scratch (no allocation after a
// first call of the same sizes).
void delta_rule_chunked(float* state, const float* q, const float* k, const float* v,
                        const float* g, const float* beta, float* out,
                        const DeltaRuleChunkParams& p);

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
// The formulas of delta_rule_chunked as written there: G summed in ascending order, each e^x by
// std::exp, every dot product and every sum over s in ascending order, no FMA.
void delta_rule_chunked(float* state, const float* q, const float* k, const float* v,
                        const float* g, const float* beta, float* out,
                        const DeltaRuleChunkParams& p);
}  // namespace reference

}  // namespace steermoe::kernels
