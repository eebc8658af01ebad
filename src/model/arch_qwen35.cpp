// Gated DeltaNet (linear attention) weights of Qwen3-Next and Qwen3.5 / 3.6 MoE, from both file
// formats, bound into one canonical layout (LinearAttnWeights):
//   HF Qwen3-Next   in_proj_qkvz / in_proj_ba fused, interleaved per key head -> rows gathered
//   HF Qwen3.5      in_proj_qkv, in_proj_z, in_proj_b, in_proj_a            -> used in place
//   GGUF qwen3next  attn_qkv, attn_gate (de-interleaved by llama.cpp; older files: ssm_in, the
//                   interleaved in_proj_qkvz), ssm_beta_alpha (fused)
//   GGUF qwen35moe  attn_qkv, attn_gate, ssm_beta, ssm_alpha; value heads in tiled order
// A_log is kept as -exp(A_log) (what GGUF's ssm_a stores).
#include <cmath>

#include "model/weights_binder.hpp"

namespace steermoe::model {

FusedRows qwen3next_fused_rows(const LinearAttnConfig& a) {
  const auto nk = static_cast<uint64_t>(a.k_heads);
  const auto hk = static_cast<uint64_t>(a.k_head_dim);
  const auto hv = static_cast<uint64_t>(a.v_head_dim);
  const uint64_t r = static_cast<uint64_t>(a.v_heads) / nk;  // value heads per key head
  const uint64_t group = 2 * hk + 2 * r * hv;                // rows of one key head in qkvz
  FusedRows f;
  for (uint64_t g = 0; g < nk; ++g)
    for (uint64_t d = 0; d < hk; ++d) f.qkv.push_back(g * group + d);
  for (uint64_t g = 0; g < nk; ++g)
    for (uint64_t d = 0; d < hk; ++d) f.qkv.push_back(g * group + hk + d);
  for (uint64_t g = 0; g < nk; ++g)
    for (uint64_t d = 0; d < r * hv; ++d) f.qkv.push_back(g * group + 2 * hk + d);
  for (uint64_t g = 0; g < nk; ++g)
    for (uint64_t d = 0; d < r * hv; ++d) f.z.push_back(g * group + 2 * hk + r * hv + d);
  for (uint64_t g = 0; g < nk; ++g) {
    for (uint64_t i = 0; i < r; ++i) f.b.push_back(g * 2 * r + i);
    for (uint64_t i = 0; i < r; ++i) f.a.push_back(g * 2 * r + r + i);
  }
  return f;
}

void bind_linear_attention(WeightBinder& b, const ModelConfig& c, int l, LinearAttnWeights& w) {
  const LinearAttnConfig& a = c.linear;
  const auto H = static_cast<uint64_t>(c.hidden);
  const auto conv_dim = static_cast<uint64_t>(a.conv_dim());
  const auto vd = static_cast<uint64_t>(a.value_dim());
  const auto nv = static_cast<uint64_t>(a.v_heads);
  const auto K = static_cast<uint64_t>(a.conv_kernel);
  const bool next = c.family == Family::kQwen3Next;
  const std::string p = b.gguf() ? fmt::format("blk.{}.", l) : b.hf_layer(l) + "linear_attn.";
  if (b.gguf() && next && !b.has(p + "attn_qkv.weight") && b.has(p + "ssm_in.weight")) {
    // Older llama.cpp qwen3next GGUFs keep HF's interleaved in_proj_qkvz as ssm_in.
    const FusedRows rows = qwen3next_fused_rows(a);
    const TensorView qkvz = b.require(p + "ssm_in.weight", {conv_dim + vd, H});
    w.qkv = b.gather_rows(qkvz, rows.qkv, H);
    w.z = b.gather_rows(qkvz, rows.z, H);
  } else if (b.gguf()) {
    w.qkv = b.matrix(p + "attn_qkv.weight", conv_dim, H);
    w.z = b.matrix(p + "attn_gate.weight", vd, H);
  } else if (next) {
    const FusedRows rows = qwen3next_fused_rows(a);
    const TensorView qkvz = b.require(p + "in_proj_qkvz.weight", {conv_dim + vd, H});
    w.qkv = b.gather_rows(qkvz, rows.qkv, H);
    w.z = b.gather_rows(qkvz, rows.z, H);
  } else {
    w.qkv = b.matrix(p + "in_proj_qkv.weight", conv_dim, H);
    w.z = b.matrix(p + "in_proj_z.weight", vd, H);
  }
  if (next) {
    const FusedRows rows = qwen3next_fused_rows(a);
    const TensorView ba =
        b.require(p + (b.gguf() ? "ssm_beta_alpha.weight" : "in_proj_ba.weight"), {2 * nv, H});
    w.b = b.gather_rows(ba, rows.b, H);
    w.a = b.gather_rows(ba, rows.a, H);
  } else {
    w.b = b.matrix(p + (b.gguf() ? "ssm_beta.weight" : "in_proj_b.weight"), nv, H);
    w.a = b.matrix(p + (b.gguf() ? "ssm_alpha.weight" : "in_proj_a.weight"), nv, H);
  }
  w.conv = b.gguf() ? b.vector_of_shape(p + "ssm_conv1d.weight", {conv_dim, K})
                    : b.vector_of_shape(p + "conv1d.weight", {conv_dim, 1, K});
  w.dt_bias = b.vector(p + (b.gguf() ? "ssm_dt.bias" : "dt_bias"), nv);
  if (b.gguf()) {
    w.a_neg = b.vector(p + "ssm_a", nv);
  } else {
    w.a_neg = b.vector(p + "A_log", nv);
    // transformers: g = -A_log.float().exp() * softplus(...).
    for (float& x : w.a_neg) x = -std::exp(x);
    w.a_neg.source_dtype = DType::kF32;
  }
  for (size_t h = 0; h < w.a_neg.size(); ++h) {
    if (!(w.a_neg[h] <= 0.0f && std::isfinite(w.a_neg[h]))) {
      fail(b.where(), p + (b.gguf() ? "ssm_a" : "A_log"),
           "expected -exp(A_log) to be finite and <= 0 for every head, found {} at head {}",
           w.a_neg[h], h);
    }
  }
  w.norm = b.vector(p + (b.gguf() ? "ssm_norm.weight" : "norm.weight"),
                    static_cast<uint64_t>(a.v_head_dim));
  w.out = b.matrix(p + (b.gguf() ? "ssm_out.weight" : "out_proj.weight"), H, vd);
}

}  // namespace steermoe::model
