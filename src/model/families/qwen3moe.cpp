// Qwen3-MoE (Qwen3-30B-A3B) and the dense Qwen3 (Qwen3-0.6B, the drafter): grouped-query
// attention with per-head q/k RMSNorm, a softmax router (renormalised as configured), optional
// dense (mlp_only) layers. The dense Qwen3 is this family with every layer dense and no expert
// at all. HF model_type "qwen3_moe" / "qwen3", GGUF architecture "qwen3moe" / "qwen3".
#include <fmt/format.h>

#include "model/family_def.hpp"

namespace steermoe::model {
namespace {

using Json = nlohmann::json;

void refuse_sliding_window(const HfFields& f) {
  if (f.boolean_or("use_sliding_window", false)) {
    fail(f.where(), "use_sliding_window",
         "expected false (sliding-window attention is not supported)");
  }
}

void from_hf_moe(const HfFields& f, ModelConfig& c) {
  using L = ConfigLimits;
  fill_common(f, c);
  c.head_dim = static_cast<int>(
      f.integer_or("head_dim", c.heads > 0 ? c.hidden / c.heads : 0, 1, L::kMaxHeadDim));
  apply_rope(f, c, 10000.0);
  c.experts =
      static_cast<int>(f.integer_any({"num_experts", "num_local_experts"}, 1, L::kMaxExperts));
  c.top_k = static_cast<int>(f.integer("num_experts_per_tok", 1, L::kMaxExperts));
  c.expert_ffn = static_cast<int>(f.integer("moe_intermediate_size", 1, L::kMaxFfn));
  c.dense_ffn = static_cast<int>(f.integer_or("intermediate_size", 0, 0, L::kMaxFfn));
  c.norm_topk_prob = f.boolean_or("norm_topk_prob", false);
  refuse_sliding_window(f);
  c.qk_norm = QkNorm::kPerHead;
  c.rope = RopeKind::kNeox;
  sparse_moe_layers(f, c);
}

// Dense Qwen3 (Qwen3ForCausalLM): a Qwen3-MoE whose every layer is an mlp_only layer. Defaults
// are Qwen3Config's.
void from_hf_dense(const HfFields& f, ModelConfig& c) {
  using L = ConfigLimits;
  fill_common(f, c);
  c.head_dim = static_cast<int>(f.integer_or("head_dim", 128, 1, L::kMaxHeadDim));
  apply_rope(f, c, 10000.0);
  c.dense_ffn = static_cast<int>(f.integer_or("intermediate_size", 22016, 1, L::kMaxFfn));
  refuse_sliding_window(f);
  if (const Json* list = layer_types(f, c.layers)) {
    const Json& types = *list;
    for (size_t l = 0; l < types.size(); ++l) {
      if (!types[l].is_string() || types[l].get<std::string>() != "full_attention") {
        fail(f.where(), fmt::format("layer_types[{}]", l),
             "expected \"full_attention\" (sliding-window attention is not supported), found {}",
             json_excerpt(types[l]));
      }
    }
  }
  c.qk_norm = QkNorm::kPerHead;
  c.rope = RopeKind::kNeox;
  c.moe_layer.assign(static_cast<size_t>(c.layers), 0);
}

// The dense Qwen3 (no experts, tied embeddings): the shape of a small drafter model.
void dense_shape(bool small, ModelConfig& c) {
  c.vocab = small ? 300 : 151936;
  c.hidden = small ? 64 : 1024;
  c.layers = small ? 2 : 28;
  c.heads = small ? 4 : 16;
  c.kv_heads = small ? 2 : 8;
  c.head_dim = small ? 16 : 128;
  c.rms_eps = 1e-6f;
  c.rope_theta = small ? 10000.0f : 1e6f;
  c.max_positions = small ? 256 : 40960;
  c.dense_ffn = small ? 128 : 3072;
  c.qk_norm = QkNorm::kPerHead;
  c.tied_embeddings = true;
  c.bos_token = small ? 297 : 151643;
  c.eos_token = small ? 296 : 151645;
  c.moe_layer.assign(static_cast<size_t>(c.layers), 0);
}

constexpr std::string_view kHfTypes[] = {"qwen3_moe", "qwen3"};
constexpr std::string_view kGgufArchs[] = {"qwen3moe", "qwen3"};
constexpr std::string_view kShapes[] = {"Qwen3-30B-A3B", "Qwen3-0.6B"};
constexpr std::string_view kSmallShapes[] = {"qwen3moe-small", "qwen3-small"};

class Qwen3Moe final : public FamilyDef {
 public:
  Qwen3Moe()
      : FamilyDef({.id = Family::kQwen3Moe,
                   .name = "qwen3moe",
                   .dense_name = "qwen3",
                   .hf_types = kHfTypes,
                   .gguf_archs = kGgufArchs,
                   .dense_gguf_arch = "qwen3",
                   .attention = Mixer::kGqa,
                   .shapes = kShapes,
                   .small_shapes = kSmallShapes}) {}

  void from_hf(const HfFields& f, ModelConfig& c, std::string_view model_type) const override {
    if (model_type == "qwen3") {
      from_hf_dense(f, c);
    } else {
      from_hf_moe(f, c);
    }
  }

  void from_gguf(const GgufFile& f, ModelConfig& c, bool dense) const override {
    const std::string& p = c.gguf_prefix;
    // llama.cpp always renormalises Qwen3-MoE top-k weights; feed_forward_length is unused.
    c.head_dim = gguf_int_or(f, p + "attention.key_length", c.heads > 0 ? c.hidden / c.heads : 0);
    c.qk_norm = QkNorm::kPerHead;
    c.rope = RopeKind::kNeox;
    if (dense) {
      c.dense_ffn = gguf_int(f, p + "feed_forward_length");
      return;
    }
    c.expert_ffn = gguf_int(f, p + "expert_feed_forward_length");
    c.norm_topk_prob = true;
    // Dense layers (transformers' mlp_only_layers / decoder_sparse_step) have no router; their
    // SwiGLU width is feed_forward_length.
    for (int l = 0; l < c.layers; ++l) {
      const std::string b = "blk." + std::to_string(l) + ".";
      if (!f.has_tensor(b + "ffn_gate_inp.weight") && f.has_tensor(b + "ffn_gate.weight")) {
        c.moe_layer[static_cast<size_t>(l)] = 0;
      }
    }
    if (c.moe_layer_count() < c.layers) c.dense_ffn = gguf_int(f, p + "feed_forward_length");
  }

  void to_hf(const ModelConfig& c, Json& j) const override {
    j["num_key_value_heads"] = c.kv_heads;
    j["head_dim"] = c.head_dim;
    if (!c.has_moe()) {  // the dense Qwen3 (Qwen3Config's fields)
      j["model_type"] = "qwen3";
      j["architectures"] = {"Qwen3ForCausalLM"};
      j["intermediate_size"] = c.dense_ffn;
      j["use_sliding_window"] = false;
      return;
    }
    j["model_type"] = "qwen3_moe";
    j["architectures"] = {"Qwen3MoeForCausalLM"};
    j["num_experts"] = c.experts;
    j["moe_intermediate_size"] = c.expert_ffn;
    j["intermediate_size"] = c.dense_ffn > 0 ? c.dense_ffn : c.expert_ffn;
    sparse_moe_layers_to_hf(c, j);
  }

  void to_gguf(const ModelConfig& c, GgufKv& kv) const override {
    kv.u32("feed_forward_length", c.dense_ffn > 0 ? c.dense_ffn : c.expert_ffn);
    if (c.has_moe()) kv.u32("expert_feed_forward_length", c.expert_ffn);
    kv.u32("attention.head_count_kv", c.kv_heads);
    kv.u32("attention.key_length", c.head_dim);
    kv.u32("attention.value_length", c.head_dim);
  }

  bool shape(std::string_view name, ModelConfig& c) const override {
    c.family = Family::kQwen3Moe;
    if (name == "Qwen3-0.6B" || name == "qwen3-small") {
      dense_shape(name == "qwen3-small", c);
      return true;
    }
    if (name != "Qwen3-30B-A3B" && name != "qwen3moe-small") return false;
    const bool small = name == "qwen3moe-small";
    c.vocab = small ? 300 : 151936;
    c.hidden = small ? 64 : 2048;
    c.layers = small ? 3 : 48;
    c.heads = small ? 4 : 32;
    c.kv_heads = small ? 2 : 4;
    c.head_dim = small ? 32 : 128;
    c.rms_eps = 1e-6f;
    c.rope_theta = 1e6f;
    c.max_positions = small ? 4096 : 40960;
    c.experts = small ? 16 : 128;
    c.top_k = small ? 4 : 8;
    c.expert_ffn = small ? 32 : 768;
    c.dense_ffn = small ? 128 : 6144;
    c.norm_topk_prob = true;
    c.qk_norm = QkNorm::kPerHead;
    c.bos_token = small ? 297 : 151643;
    c.eos_token = small ? 296 : 151645;
    return true;
  }
};

}  // namespace

const FamilyDef& qwen3moe_family() {
  return family_instance<Qwen3Moe>();
}

}  // namespace steermoe::model
