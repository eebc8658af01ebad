// Attention weights of DeepSeek-V3 / Moonlight (multi-head latent attention). The HF checkpoint
// stores kv_b_proj [H * (nope + v), kv_lora]; llama.cpp's GGUF splits it into attn_k_b
// (numpy [H, kv_lora, nope], i.e. the k rows transposed per head) and attn_v_b
// ([H, v, kv_lora]). We rebuild kv_b_proj exactly (byte copies, dtype kept) so that both
// formats run the same decompressed attention.
#include "model/weights_binder.hpp"

namespace steermoe::model {

namespace {

// Rebuilds kv_b [H * (nope + v), kv_lora] from GGUF attn_k_b / attn_v_b.
kernels::Matrix rebuild_kv_b(WeightBinder& b, const ModelConfig& c, int l) {
  const auto heads = static_cast<uint64_t>(c.heads);
  const auto lora = static_cast<uint64_t>(c.mla.kv_lora_rank);
  const auto nope = static_cast<uint64_t>(c.mla.qk_nope_head_dim);
  const auto vdim = static_cast<uint64_t>(c.mla.v_head_dim);
  const TensorView kb = b.require(b.layer_name(l, "attn_k_b", ""), {heads, lora, nope});
  const TensorView vb = b.require(b.layer_name(l, "attn_v_b", ""), {heads, vdim, lora});
  const uint64_t rows = heads * (nope + vdim);
  kernels::Matrix m;
  m.rows = rows;
  m.cols = lora;
  const bool same_plain =
      kb.dtype == vb.dtype &&
      (kb.dtype == DType::kF32 || kb.dtype == DType::kBF16 || kb.dtype == DType::kF16);
  if (same_plain) {
    const uint64_t es = dtype_size(kb.dtype);
    std::vector<std::byte> out(rows * lora * es);
    for (uint64_t h = 0; h < heads; ++h) {
      for (uint64_t r = 0; r < nope; ++r) {
        for (uint64_t col = 0; col < lora; ++col) {
          std::memcpy(&out[((h * (nope + vdim) + r) * lora + col) * es],
                      kb.data + ((h * lora + col) * nope + r) * es, es);
        }
      }
      std::memcpy(&out[(h * (nope + vdim) + nope) * lora * es], vb.data + h * vdim * lora * es,
                  vdim * lora * es);
    }
    m.dtype = kb.dtype == DType::kF32    ? kernels::DType::kF32
              : kb.dtype == DType::kBF16 ? kernels::DType::kBF16
                                         : kernels::DType::kF16;
    m.data = b.own(std::move(out));
    return m;
  }
  const std::vector<float> k = kb.to_f32();
  const std::vector<float> v = vb.to_f32();
  std::vector<std::byte> out(rows * lora * sizeof(float));
  auto* o = reinterpret_cast<float*>(out.data());
  for (uint64_t h = 0; h < heads; ++h) {
    for (uint64_t r = 0; r < nope; ++r) {
      for (uint64_t col = 0; col < lora; ++col) {
        o[(h * (nope + vdim) + r) * lora + col] = k[(h * lora + col) * nope + r];
      }
    }
    std::memcpy(&o[(h * (nope + vdim) + nope) * lora], &v[h * vdim * lora],
                vdim * lora * sizeof(float));
  }
  m.dtype = kernels::DType::kF32;
  m.data = b.own(std::move(out));
  return m;
}

}  // namespace

void bind_mla_attention(WeightBinder& b, const ModelConfig& c, int l, LayerWeights& w) {
  const auto H = static_cast<uint64_t>(c.hidden);
  const auto heads = static_cast<uint64_t>(c.heads);
  const auto qk = static_cast<uint64_t>(c.mla.qk_nope_head_dim + c.mla.qk_rope_head_dim);
  const auto lora = static_cast<uint64_t>(c.mla.kv_lora_rank);
  const auto rope = static_cast<uint64_t>(c.mla.qk_rope_head_dim);
  const auto vdim = static_cast<uint64_t>(c.mla.v_head_dim);
  if (c.mla.q_lora_rank > 0) {
    const auto ql = static_cast<uint64_t>(c.mla.q_lora_rank);
    w.q_a = b.matrix(b.layer_name(l, "attn_q_a", "self_attn.q_a_proj"), ql, H);
    w.q_a_norm = b.vector(b.layer_name(l, "attn_q_a_norm", "self_attn.q_a_layernorm"), ql);
    w.q_b = b.matrix(b.layer_name(l, "attn_q_b", "self_attn.q_b_proj"), heads * qk, ql);
  } else {
    w.q_b = b.matrix(b.layer_name(l, "attn_q", "self_attn.q_proj"), heads * qk, H);
  }
  w.kv_a =
      b.matrix(b.layer_name(l, "attn_kv_a_mqa", "self_attn.kv_a_proj_with_mqa"), lora + rope, H);
  w.kv_a_norm = b.vector(b.layer_name(l, "attn_kv_a_norm", "self_attn.kv_a_layernorm"), lora);
  const std::string kv_b_name = b.layer_name(l, "attn_kv_b", "self_attn.kv_b_proj");
  if (!b.gguf() || b.has(kv_b_name)) {
    w.kv_b = b.matrix(kv_b_name, heads * (qk - rope + vdim), lora);
  } else {
    w.kv_b = rebuild_kv_b(b, c, l);
  }
  w.wo = b.matrix(b.layer_name(l, "attn_output", "self_attn.o_proj"), H, heads * vdim);
}

}  // namespace steermoe::model
