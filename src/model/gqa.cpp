// Grouped-query attention weights, shared by the GQA families: OLMoE (q/k RMSNorm over the whole
// projection), Qwen3 / Qwen3-MoE (per-head q/k RMSNorm) and the gated full attention of
// Qwen3-Next / Qwen3.5 (q_proj with a per-head output gate). Names of both file formats.
#include "model/family_def.hpp"
#include "model/weights_binder.hpp"

namespace steermoe::model {

void layout_gqa_attention(LayoutBuilder& b, const ModelConfig& c, int l) {
  using U = uint64_t;
  const U H = static_cast<U>(c.hidden), heads = static_cast<U>(c.heads);
  const U hd = static_cast<U>(c.head_dim), kvh = static_cast<U>(c.kv_heads);
  const U q_rows = heads * hd * (c.attn_output_gate ? 2 : 1);
  b.layer(l, "attn_q", "self_attn.q_proj", {q_rows, H}, Role::kWq);
  b.layer(l, "attn_k", "self_attn.k_proj", {kvh * hd, H}, Role::kWk);
  b.layer(l, "attn_v", "self_attn.v_proj", {kvh * hd, H}, Role::kWv);
  b.layer(l, "attn_output", "self_attn.o_proj", {H, heads * hd}, Role::kWo);
  if (c.qk_norm != QkNorm::kNone) {
    const bool whole = c.qk_norm == QkNorm::kWholeProjection;
    b.layer(l, "attn_q_norm", "self_attn.q_norm", {whole ? heads * hd : hd}, Role::kQNorm);
    b.layer(l, "attn_k_norm", "self_attn.k_norm", {whole ? kvh * hd : hd}, Role::kKNorm);
  }
}

void bind_gqa_attention(WeightBinder& b, const ModelConfig& c, int l, LayerWeights& w) {
  const auto H = static_cast<uint64_t>(c.hidden);
  const auto q_rows = static_cast<uint64_t>(c.heads) * static_cast<uint64_t>(c.head_dim);
  const auto kv_rows = static_cast<uint64_t>(c.kv_heads) * static_cast<uint64_t>(c.head_dim);
  // Gated attention (Qwen3-Next / 3.5): q_proj yields [query | gate] per head.
  w.wq = b.matrix(b.layer_name(l, "attn_q", "self_attn.q_proj"),
                  c.attn_output_gate ? 2 * q_rows : q_rows, H);
  w.wk = b.matrix(b.layer_name(l, "attn_k", "self_attn.k_proj"), kv_rows, H);
  w.wv = b.matrix(b.layer_name(l, "attn_v", "self_attn.v_proj"), kv_rows, H);
  w.wo = b.matrix(b.layer_name(l, "attn_output", "self_attn.o_proj"), H, q_rows);
  const bool whole = c.qk_norm == QkNorm::kWholeProjection;
  if (c.qk_norm != QkNorm::kNone) {
    w.q_norm = b.vector(b.layer_name(l, "attn_q_norm", "self_attn.q_norm"),
                        whole ? q_rows : static_cast<uint64_t>(c.head_dim));
    w.k_norm = b.vector(b.layer_name(l, "attn_k_norm", "self_attn.k_norm"),
                        whole ? kv_rows : static_cast<uint64_t>(c.head_dim));
  }
}

}  // namespace steermoe::model
