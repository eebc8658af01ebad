#include "model/weights_layout.hpp"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <fstream>

#include "common/error.hpp"
#include "common/output_file.hpp"
#include "model/hf_config.hpp"
#include "model/safetensors.hpp"

namespace steermoe::model {

uint64_t TensorSlot::elements() const {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;
  return n;
}

namespace {

using U = uint64_t;

class LayoutBuilder {
 public:
  explicit LayoutBuilder(WeightFormat f) : gguf_(f == WeightFormat::kGguf) {}

  void add(std::string gguf_name, std::string hf_name, std::vector<U> shape, Role role,
           int layer = -1, int expert = -1) {
    slots_.push_back(
        {gguf_ ? std::move(gguf_name) : std::move(hf_name), std::move(shape), role, layer, expert});
  }
  void layer(int l, const char* g, const char* h, std::vector<U> shape, Role role) {
    add(fmt::format("blk.{}.{}.weight", l, g), fmt::format("model.layers.{}.{}.weight", l, h),
        std::move(shape), role, l);
  }
  bool gguf() const { return gguf_; }
  std::vector<TensorSlot> take() { return std::move(slots_); }

 private:
  bool gguf_;
  std::vector<TensorSlot> slots_;
};

void add_swiglu(LayoutBuilder& b, int l, const char* gsuffix, const char* hprefix, U hidden, U ffn,
                Role gate, Role up, Role down) {
  b.layer(l, fmt::format("ffn_gate{}", gsuffix).c_str(),
          fmt::format("{}.gate_proj", hprefix).c_str(), {ffn, hidden}, gate);
  b.layer(l, fmt::format("ffn_up{}", gsuffix).c_str(), fmt::format("{}.up_proj", hprefix).c_str(),
          {ffn, hidden}, up);
  b.layer(l, fmt::format("ffn_down{}", gsuffix).c_str(),
          fmt::format("{}.down_proj", hprefix).c_str(), {hidden, ffn}, down);
}

}  // namespace

std::vector<TensorSlot> tensor_layout(const ModelConfig& c, WeightFormat format) {
  LayoutBuilder b(format);
  const U H = static_cast<U>(c.hidden), V = static_cast<U>(c.vocab);
  const U heads = static_cast<U>(c.heads);
  b.add("token_embd.weight", "model.embed_tokens.weight", {V, H}, Role::kEmbed);
  b.add("output_norm.weight", "model.norm.weight", {H}, Role::kFinalNorm);
  if (!c.tied_embeddings) b.add("output.weight", "lm_head.weight", {V, H}, Role::kOutput);
  for (int l = 0; l < c.layers; ++l) {
    b.layer(l, "attn_norm", "input_layernorm", {H}, Role::kAttnNorm);
    if (c.family == Family::kDeepseekV3) {
      const MlaConfig& m = c.mla;
      const U qk = static_cast<U>(m.qk_nope_head_dim + m.qk_rope_head_dim);
      const U lora = static_cast<U>(m.kv_lora_rank), rope = static_cast<U>(m.qk_rope_head_dim);
      const U nope = static_cast<U>(m.qk_nope_head_dim), vd = static_cast<U>(m.v_head_dim);
      if (m.q_lora_rank > 0) {
        const U ql = static_cast<U>(m.q_lora_rank);
        b.layer(l, "attn_q_a", "self_attn.q_a_proj", {ql, H}, Role::kQa);
        b.layer(l, "attn_q_a_norm", "self_attn.q_a_layernorm", {ql}, Role::kQaNorm);
        b.layer(l, "attn_q_b", "self_attn.q_b_proj", {heads * qk, ql}, Role::kQb);
      } else {
        b.layer(l, "attn_q", "self_attn.q_proj", {heads * qk, H}, Role::kQb);
      }
      b.layer(l, "attn_kv_a_mqa", "self_attn.kv_a_proj_with_mqa", {lora + rope, H}, Role::kKvA);
      b.layer(l, "attn_kv_a_norm", "self_attn.kv_a_layernorm", {lora}, Role::kKvANorm);
      if (b.gguf()) {
        b.layer(l, "attn_k_b", "", {heads, lora, nope}, Role::kKB);
        b.layer(l, "attn_v_b", "", {heads, vd, lora}, Role::kVB);
      } else {
        b.layer(l, "", "self_attn.kv_b_proj", {heads * (nope + vd), lora}, Role::kKvB);
      }
      b.layer(l, "attn_output", "self_attn.o_proj", {H, heads * vd}, Role::kWo);
    } else {
      const U hd = static_cast<U>(c.head_dim), kvh = static_cast<U>(c.kv_heads);
      b.layer(l, "attn_q", "self_attn.q_proj", {heads * hd, H}, Role::kWq);
      b.layer(l, "attn_k", "self_attn.k_proj", {kvh * hd, H}, Role::kWk);
      b.layer(l, "attn_v", "self_attn.v_proj", {kvh * hd, H}, Role::kWv);
      b.layer(l, "attn_output", "self_attn.o_proj", {H, heads * hd}, Role::kWo);
      if (c.qk_norm != QkNorm::kNone) {
        const bool whole = c.qk_norm == QkNorm::kWholeProjection;
        b.layer(l, "attn_q_norm", "self_attn.q_norm", {whole ? heads * hd : hd}, Role::kQNorm);
        b.layer(l, "attn_k_norm", "self_attn.k_norm", {whole ? kvh * hd : hd}, Role::kKNorm);
      }
    }
    b.layer(l, "ffn_norm", "post_attention_layernorm", {H}, Role::kFfnNorm);
    if (!c.moe_layer[static_cast<size_t>(l)]) {
      add_swiglu(b, l, "", "mlp", H, static_cast<U>(c.dense_ffn), Role::kDenseGate, Role::kDenseUp,
                 Role::kDenseDown);
      continue;
    }
    const U E = static_cast<U>(c.experts), I = static_cast<U>(c.expert_ffn);
    b.layer(l, "ffn_gate_inp", "mlp.gate", {E, H}, Role::kRouter);
    if (c.correction_bias) {
      b.add(fmt::format("blk.{}.exp_probs_b.bias", l),
            fmt::format("model.layers.{}.mlp.gate.e_score_correction_bias", l), {E},
            Role::kRouterBias, l);
    }
    if (b.gguf()) {
      b.add(fmt::format("blk.{}.ffn_gate_exps.weight", l), "", {E, I, H}, Role::kExpGate, l, -1);
      b.add(fmt::format("blk.{}.ffn_up_exps.weight", l), "", {E, I, H}, Role::kExpUp, l, -1);
      b.add(fmt::format("blk.{}.ffn_down_exps.weight", l), "", {E, H, I}, Role::kExpDown, l, -1);
    } else {
      for (int e = 0; e < c.experts; ++e) {
        const std::string p = fmt::format("model.layers.{}.mlp.experts.{}.", l, e);
        b.add("", p + "gate_proj.weight", {I, H}, Role::kExpGate, l, e);
        b.add("", p + "up_proj.weight", {I, H}, Role::kExpUp, l, e);
        b.add("", p + "down_proj.weight", {H, I}, Role::kExpDown, l, e);
      }
    }
    if (c.shared_ffn > 0) {
      add_swiglu(b, l, "_shexp", "mlp.shared_experts", H, static_cast<U>(c.shared_ffn),
                 Role::kSharedGate, Role::kSharedUp, Role::kSharedDown);
    }
  }
  return b.take();
}

std::vector<std::pair<std::string, GgufValue>> gguf_model_metadata(const ModelConfig& c,
                                                                   const std::string& name) {
  std::vector<std::pair<std::string, GgufValue>> kv;
  const std::string arch = c.family == Family::kOlmoe      ? "olmoe"
                           : c.family == Family::kQwen3Moe ? "qwen3moe"
                                                           : "deepseek2";
  auto u32 = [&](const std::string& key, int v) {
    kv.emplace_back(arch + "." + key, GgufValue::u32(static_cast<uint32_t>(v)));
  };
  auto f32 = [&](const std::string& key, float v) {
    kv.emplace_back(arch + "." + key, GgufValue::f32(v));
  };
  kv.emplace_back("general.architecture", GgufValue::string(arch));
  kv.emplace_back("general.name", GgufValue::string(name));
  u32("context_length", c.max_positions);
  u32("embedding_length", c.hidden);
  u32("block_count", c.layers);
  u32("attention.head_count", c.heads);
  f32("attention.layer_norm_rms_epsilon", c.rms_eps);
  f32("rope.freq_base", c.rope_theta);
  u32("vocab_size", c.vocab);
  u32("expert_count", c.experts);
  u32("expert_used_count", c.top_k);
  switch (c.family) {
    case Family::kOlmoe:
      u32("feed_forward_length", c.expert_ffn);
      u32("attention.head_count_kv", c.kv_heads);
      u32("attention.key_length", c.head_dim);
      u32("attention.value_length", c.head_dim);
      break;
    case Family::kQwen3Moe:
      u32("feed_forward_length", c.dense_ffn > 0 ? c.dense_ffn : c.expert_ffn);
      u32("expert_feed_forward_length", c.expert_ffn);
      u32("attention.head_count_kv", c.kv_heads);
      u32("attention.key_length", c.head_dim);
      u32("attention.value_length", c.head_dim);
      break;
    case Family::kDeepseekV3: {
      const MlaConfig& m = c.mla;
      int dense_lead = 0;
      while (dense_lead < c.layers && !c.moe_layer[static_cast<size_t>(dense_lead)]) ++dense_lead;
      u32("feed_forward_length", c.dense_ffn);
      u32("attention.head_count_kv", 1);
      u32("attention.key_length", m.kv_lora_rank + m.qk_rope_head_dim);
      u32("attention.value_length", m.kv_lora_rank);
      u32("attention.key_length_mla", m.qk_nope_head_dim + m.qk_rope_head_dim);
      u32("attention.value_length_mla", m.v_head_dim);
      u32("attention.q_lora_rank", m.q_lora_rank);
      u32("attention.kv_lora_rank", m.kv_lora_rank);
      u32("rope.dimension_count", m.qk_rope_head_dim);
      u32("leading_dense_block_count", dense_lead);
      u32("expert_feed_forward_length", c.expert_ffn);
      u32("expert_shared_count", c.expert_ffn > 0 ? c.shared_ffn / c.expert_ffn : 0);
      f32("expert_weights_scale", c.routed_scaling_factor);
      kv.emplace_back(arch + ".expert_weights_norm", GgufValue::boolean(c.norm_topk_prob));
      u32("expert_gating_func", c.router == RouterScore::kSigmoid ? 2 : 1);
      if (c.n_group > 1) {
        u32("expert_group_count", c.n_group);
        u32("expert_group_used_count", c.topk_group);
      }
      break;
    }
  }
  return kv;
}

void write_model(const ModelConfig& c, const std::filesystem::path& path, const SlotSource& source,
                 const std::vector<std::pair<std::string, GgufValue>>& extra_gguf) {
  const bool gguf = path.extension() == ".gguf";
  const std::vector<TensorSlot> slots =
      tensor_layout(c, gguf ? WeightFormat::kGguf : WeightFormat::kSafetensors);
  auto producer = [&source](const TensorSlot& slot, DType dtype) {
    return [&source, slot, dtype](OutputFile& out) { source.produce(slot, dtype, out); };
  };
  if (gguf) {
    GgufWriter w(path);
    for (auto& [k, v] : gguf_model_metadata(c, path.stem().string())) w.add(k, v);
    for (const auto& [k, v] : extra_gguf) w.add(k, v);
    for (const TensorSlot& s : slots) {
      const DType dt = source.dtype_of(s);
      w.add_tensor(s.name, dt, s.shape, producer(s, dt));
    }
    w.finish();
    return;
  }
  create_output_directory(path);  // a clear error, not a raw filesystem_error
  const DType matrix_dtype = source.dtype_of(slots.front());
  const char* torch_dtype = matrix_dtype == DType::kBF16  ? "bfloat16"
                            : matrix_dtype == DType::kF16 ? "float16"
                                                          : "float32";
  {
    std::ofstream cfg(path / "config.json", std::ios::binary | std::ios::trunc);
    if (!cfg) fail((path / "config.json").string(), "open", "cannot create the file");
    cfg << hf_config_json(c, torch_dtype);
    if (!cfg) fail((path / "config.json").string(), "write", "short write");
  }
  SafetensorsWriter w(path / "model.safetensors");
  w.add_metadata("format", "pt");
  for (const TensorSlot& s : slots) {
    const DType dt = source.dtype_of(s);
    w.add_tensor(s.name, dt, s.shape, producer(s, dt));
  }
  w.finish();
}

}  // namespace steermoe::model
