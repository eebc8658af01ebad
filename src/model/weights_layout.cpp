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

// Gated DeltaNet tensors. HF: Qwen3-Next stores in_proj_qkvz / in_proj_ba fused and
// interleaved per key head, Qwen3.5 in_proj_qkv / z / b / a split; A_log and dt_bias have no
// ".weight". GGUF (llama.cpp): attn_qkv, attn_gate, ssm_beta + ssm_alpha (qwen35moe) or
// ssm_beta_alpha (qwen3next), ssm_conv1d [conv_dim, K], ssm_dt.bias, ssm_a, ssm_norm, ssm_out.
void add_linear_attention(LayoutBuilder& b, const ModelConfig& c, int l) {
  const LinearAttnConfig& a = c.linear;
  const U H = static_cast<U>(c.hidden);
  const U conv_dim = static_cast<U>(a.conv_dim()), vd = static_cast<U>(a.value_dim());
  const U nv = static_cast<U>(a.v_heads), K = static_cast<U>(a.conv_kernel);
  const bool next = c.family == Family::kQwen3Next;
  auto hf = [l](const char* name) { return fmt::format("model.layers.{}.linear_attn.{}", l, name); };
  auto gg = [l](const char* name) { return fmt::format("blk.{}.{}", l, name); };
  if (!b.gguf() && next) {
    b.add("", hf("in_proj_qkvz.weight"), {conv_dim + vd, H}, Role::kLinQkvz, l);
    b.add("", hf("in_proj_ba.weight"), {2 * nv, H}, Role::kLinBa, l);
  } else {
    b.add(gg("attn_qkv.weight"), hf("in_proj_qkv.weight"), {conv_dim, H}, Role::kLinQkv, l);
    b.add(gg("attn_gate.weight"), hf("in_proj_z.weight"), {vd, H}, Role::kLinZ, l);
    if (next) {
      b.add(gg("ssm_beta_alpha.weight"), "", {2 * nv, H}, Role::kLinBa, l);
    } else {
      b.add(gg("ssm_beta.weight"), hf("in_proj_b.weight"), {nv, H}, Role::kLinB, l);
      b.add(gg("ssm_alpha.weight"), hf("in_proj_a.weight"), {nv, H}, Role::kLinA, l);
    }
  }
  b.add(gg("ssm_conv1d.weight"), hf("conv1d.weight"),
        b.gguf() ? std::vector<U>{conv_dim, K} : std::vector<U>{conv_dim, 1, K}, Role::kLinConv, l);
  b.add(gg("ssm_dt.bias"), hf("dt_bias"), {nv}, Role::kLinDtBias, l);
  b.add(gg("ssm_a"), hf("A_log"), {nv}, Role::kLinALog, l);
  b.add(gg("ssm_norm.weight"), hf("norm.weight"), {static_cast<U>(a.v_head_dim)}, Role::kLinNorm, l);
  b.add(gg("ssm_out.weight"), hf("out_proj.weight"), {H, vd}, Role::kLinOut, l);
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
    if (c.is_linear(l)) {
      add_linear_attention(b, c, l);
    } else if (c.family == Family::kDeepseekV3) {
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
      add_swiglu(b, l, "_shexp", is_hybrid(c.family) ? "mlp.shared_expert" : "mlp.shared_experts",
                 H, static_cast<U>(c.shared_ffn), Role::kSharedGate, Role::kSharedUp,
                 Role::kSharedDown);
    }
    if (c.shared_expert_gate) {
      if (b.gguf()) {
        b.layer(l, "ffn_gate_inp_shexp", "", {H}, Role::kSharedExpGate);
      } else {
        b.layer(l, "", "mlp.shared_expert_gate", {1, H}, Role::kSharedExpGate);
      }
    }
  }
  return b.take();
}

std::string gguf_arch_name(Family family) {
  switch (family) {
    case Family::kOlmoe:
      return "olmoe";
    case Family::kQwen3Moe:
      return "qwen3moe";
    case Family::kDeepseekV3:
      return "deepseek2";
    case Family::kQwen3Next:
      return "qwen3next";
    case Family::kQwen35Moe:
      return "qwen35moe";
  }
  return "?";
}

std::string gguf_arch_name(const ModelConfig& c) {
  if (c.family == Family::kQwen3Moe && !c.has_moe()) return "qwen3";
  return gguf_arch_name(c.family);
}

std::vector<std::pair<std::string, GgufValue>> gguf_model_metadata(const ModelConfig& c,
                                                                   const std::string& name) {
  std::vector<std::pair<std::string, GgufValue>> kv;
  const std::string arch = gguf_arch_name(c);
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
  if (c.has_moe()) {  // llama.cpp's dense qwen3 has no expert keys
    u32("expert_count", c.experts);
    u32("expert_used_count", c.top_k);
  }
  if (c.rope_scaling.kind == RopeScalingKind::kYarn) {
    const RopeScaling& y = c.rope_scaling;
    kv.emplace_back(arch + ".rope.scaling.type", GgufValue::string("yarn"));
    f32("rope.scaling.factor", y.factor);
    u32("rope.scaling.original_context_length", y.original_max_positions);
    f32("rope.scaling.yarn_beta_fast", y.beta_fast);
    f32("rope.scaling.yarn_beta_slow", y.beta_slow);
    if (!y.truncate) {
      fail(c.source, "rope_parameters.truncate", "GGUF cannot store YaRN with truncate = false");
    }
    // llama.cpp's yarn_log_multiplier is 0.1 * mscale_all_dim and takes the rope's own mscale to
    // be equal; any other attention factor is stored explicitly.
    const float mul = y.mscale_all_dim != 0.0f ? y.mscale_all_dim : y.mscale;
    if (mul != 0.0f) f32("rope.scaling.yarn_log_multiplier", 0.1f * mul);
    ModelConfig implied = c;
    implied.rope_scaling.mscale = implied.rope_scaling.mscale_all_dim = mul;
    implied.rope_scaling.attention_factor = 0.0f;
    if (implied.rope_attention_factor() != c.rope_attention_factor()) {
      f32("rope.scaling.attn_factor", c.rope_attention_factor());
    }
  }
  switch (c.family) {
    case Family::kQwen3Next:
    case Family::kQwen35Moe: {
      const LinearAttnConfig& a = c.linear;
      int interval = 0;
      for (int l = 0; l < c.layers && interval == 0; ++l) {
        if (!c.is_linear(l)) interval = l + 1;
      }
      if (interval == 0) interval = c.layers + 1;
      for (int l = 0; l < c.layers; ++l) {
        if (c.is_linear(l) != ((l + 1) % interval != 0)) {
          fail(c.source, "layer_types",
               "GGUF stores the layer pattern as full_attention_interval; layer {} breaks the "
               "every-{}th-layer pattern",
               l, interval);
        }
      }
      for (int l = 0; l < c.layers; ++l) {
        if (!c.moe_layer[static_cast<size_t>(l)]) {
          fail(c.source, "mlp_only_layers", "GGUF {} has no dense layers (layer {} is dense)", arch, l);
        }
      }
      u32("feed_forward_length", c.expert_ffn);
      u32("expert_feed_forward_length", c.expert_ffn);
      u32("expert_shared_feed_forward_length", c.shared_ffn);
      u32("attention.head_count_kv", c.kv_heads);
      u32("attention.key_length", c.head_dim);
      u32("attention.value_length", c.head_dim);
      u32("rope.dimension_count", c.rotary_dim());
      kv.emplace_back(arch + ".expert_weights_norm", GgufValue::boolean(c.norm_topk_prob));
      u32("ssm.conv_kernel", a.conv_kernel);
      u32("ssm.state_size", a.k_head_dim);
      u32("ssm.group_count", a.k_heads);
      u32("ssm.time_step_rank", a.v_heads);
      u32("ssm.inner_size", a.value_dim());
      u32("full_attention_interval", interval);
      if (c.family == Family::kQwen35Moe) {
        // mRoPE sections (text positions make them irrelevant; llama.cpp requires the key).
        const int half = c.rotary_dim() / 2;
        const int t = half == 32 ? 11 : half;
        const int h = half == 32 ? 11 : 0;
        const int w = half - t - h;
        const std::vector<int32_t> sections = {t, h, w, 0};
        kv.emplace_back(arch + ".rope.dimension_sections", GgufValue::i32_array(sections));
      }
      break;
    }
    case Family::kOlmoe:
      if (c.clip_qkv > 0.0f) f32("attention.clamp_kqv", c.clip_qkv);
      u32("feed_forward_length", c.expert_ffn);
      u32("attention.head_count_kv", c.kv_heads);
      u32("attention.key_length", c.head_dim);
      u32("attention.value_length", c.head_dim);
      break;
    case Family::kQwen3Moe:
      u32("feed_forward_length", c.dense_ffn > 0 ? c.dense_ffn : c.expert_ffn);
      if (c.has_moe()) u32("expert_feed_forward_length", c.expert_ffn);
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
