#include "model/weights_layout.hpp"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <fstream>

#include "common/error.hpp"
#include "common/output_file.hpp"
#include "model/family_def.hpp"
#include "model/hf_config.hpp"
#include "model/safetensors.hpp"

namespace steermoe::model {

uint64_t TensorSlot::elements() const {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;
  return n;
}

void LayoutBuilder::add(std::string gguf_name, std::string hf_name, std::vector<uint64_t> shape,
                        Role role, int layer, int expert) {
  slots_.push_back(
      {gguf_ ? std::move(gguf_name) : std::move(hf_name), std::move(shape), role, layer, expert});
}

void LayoutBuilder::layer(int l, const char* g, const char* h, std::vector<uint64_t> shape,
                          Role role) {
  add(fmt::format("blk.{}.{}.weight", l, g), fmt::format("model.layers.{}.{}.weight", l, h),
      std::move(shape), role, l);
}

namespace {

using U = uint64_t;

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
  const FamilyDef& def = family_def(c.family);
  LayoutBuilder b(format);
  const U H = static_cast<U>(c.hidden), V = static_cast<U>(c.vocab);
  b.add("token_embd.weight", "model.embed_tokens.weight", {V, H}, Role::kEmbed);
  b.add("output_norm.weight", "model.norm.weight", {H}, Role::kFinalNorm);
  if (!c.tied_embeddings) b.add("output.weight", "lm_head.weight", {V, H}, Role::kOutput);
  for (int l = 0; l < c.layers; ++l) {
    b.layer(l, "attn_norm", "input_layernorm", {H}, Role::kAttnNorm);
    def.layout_mixer(b, c, l);
    b.layer(l, def.gguf_ffn_norm, "post_attention_layernorm", {H}, Role::kFfnNorm);
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
      add_swiglu(b, l, "_shexp", def.hf_shared_expert, H, static_cast<U>(c.shared_ffn),
                 Role::kSharedGate, Role::kSharedUp, Role::kSharedDown);
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
  return std::string(family_def(family).gguf_archs.front());
}

std::string gguf_arch_name(const ModelConfig& c) {
  const FamilyDef& def = family_def(c.family);
  if (!c.has_moe() && !def.dense_gguf_arch.empty()) return std::string(def.dense_gguf_arch);
  return std::string(def.gguf_archs.front());
}

std::vector<std::pair<std::string, GgufValue>> gguf_model_metadata(const ModelConfig& c,
                                                                   const std::string& name) {
  std::vector<std::pair<std::string, GgufValue>> kv;
  const std::string arch = gguf_arch_name(c);
  GgufKv out(arch, kv);
  const auto u32 = [&out](const std::string& key, int v) { out.u32(key, v); };
  const auto f32 = [&out](const std::string& key, float v) { out.f32(key, v); };
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
  family_def(c.family).to_gguf(c, out);
  return kv;
}

void write_model(const ModelConfig& c, const std::filesystem::path& path, const SlotSource& source,
                 const std::vector<std::pair<std::string, GgufValue>>& extra_gguf) {
  const bool gguf = is_gguf_path(path);
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
