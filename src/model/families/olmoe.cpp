// OLMoE (allenai/OLMoE-1B-7B): grouped-query attention with q/k RMSNorm over the whole
// projection and optional clip_qkv, a softmax router without renormalisation, routed experts
// only. HF model_type "olmoe", GGUF architecture "olmoe".
#include "model/family_def.hpp"

namespace steermoe::model {
namespace {

using Json = nlohmann::json;

constexpr std::string_view kHfTypes[] = {"olmoe"};
constexpr std::string_view kGgufArchs[] = {"olmoe"};
constexpr std::string_view kShapes[] = {"OLMoE-1B-7B"};
constexpr std::string_view kSmallShapes[] = {"olmoe-small"};

class Olmoe final : public FamilyDef {
 public:
  Olmoe()
      : FamilyDef({.id = Family::kOlmoe,
                   .name = "olmoe",
                   .hf_types = kHfTypes,
                   .gguf_archs = kGgufArchs,
                   .attention = Mixer::kGqa,
                   .shapes = kShapes,
                   .small_shapes = kSmallShapes}) {}

  void from_hf(const HfFields& f, ModelConfig& c, std::string_view /*model_type*/) const override {
    using L = ConfigLimits;
    fill_common(f, c);
    c.head_dim = static_cast<int>(
        f.integer_or("head_dim", c.heads > 0 ? c.hidden / c.heads : 0, 1, L::kMaxHeadDim));
    apply_rope(f, c, 10000.0);
    c.experts =
        static_cast<int>(f.integer_any({"num_experts", "num_local_experts"}, 1, L::kMaxExperts));
    c.top_k = static_cast<int>(f.integer("num_experts_per_tok", 1, L::kMaxExperts));
    c.expert_ffn = static_cast<int>(f.integer("intermediate_size", 1, L::kMaxFfn));
    c.norm_topk_prob = f.boolean_or("norm_topk_prob", false);
    if (f.has("clip_qkv")) {
      const double clip = f.number("clip_qkv");
      if (!(clip > 0.0 && clip < 1e30)) {
        fail(f.where(), "clip_qkv", "expected null or a positive value, found {}", clip);
      }
      c.clip_qkv = static_cast<float>(clip);
    }
    c.qk_norm = QkNorm::kWholeProjection;
    c.rope = RopeKind::kNeox;
    c.moe_layer.assign(static_cast<size_t>(c.layers), 1);
  }

  void from_gguf(const GgufFile& f, ModelConfig& c, bool /*dense*/) const override {
    const std::string& p = c.gguf_prefix;
    // llama.cpp convention: feed_forward_length is the expert FFN size; no renormalisation.
    c.head_dim = gguf_int_or(f, p + "attention.key_length", c.heads > 0 ? c.hidden / c.heads : 0);
    c.expert_ffn =
        gguf_int_or(f, p + "expert_feed_forward_length", gguf_int(f, p + "feed_forward_length"));
    c.qk_norm = QkNorm::kWholeProjection;
    c.rope = RopeKind::kNeox;
    c.norm_topk_prob = false;
    c.clip_qkv = static_cast<float>(f.find_float(p + "attention.clamp_kqv").value_or(0.0));
  }

  void to_hf(const ModelConfig& c, Json& j) const override {
    j["model_type"] = "olmoe";
    j["architectures"] = {"OlmoeForCausalLM"};
    j["num_key_value_heads"] = c.kv_heads;
    j["head_dim"] = c.head_dim;
    j["num_experts"] = c.experts;
    j["intermediate_size"] = c.expert_ffn;
    j["clip_qkv"] = c.clip_qkv > 0.0f ? Json(c.clip_qkv) : Json(nullptr);
  }

  void to_gguf(const ModelConfig& c, GgufKv& kv) const override {
    if (c.clip_qkv > 0.0f) kv.f32("attention.clamp_kqv", c.clip_qkv);
    kv.u32("feed_forward_length", c.expert_ffn);
    kv.u32("attention.head_count_kv", c.kv_heads);
    kv.u32("attention.key_length", c.head_dim);
    kv.u32("attention.value_length", c.head_dim);
  }

  bool shape(std::string_view name, ModelConfig& c) const override {
    if (name != "OLMoE-1B-7B" && name != "olmoe-small") return false;
    const bool small = name == "olmoe-small";
    c.family = Family::kOlmoe;
    c.vocab = small ? 300 : 50304;
    c.hidden = small ? 64 : 2048;
    c.layers = small ? 3 : 16;
    c.heads = c.kv_heads = small ? 4 : 16;
    c.head_dim = small ? 16 : 128;
    c.rms_eps = 1e-5f;
    c.rope_theta = 10000.0f;
    c.experts = small ? 16 : 64;
    c.top_k = small ? 4 : 8;
    c.expert_ffn = small ? 32 : 1024;
    c.qk_norm = QkNorm::kWholeProjection;
    c.eos_token = small ? 296 : 50279;
    return true;
  }
};

}  // namespace

const FamilyDef& olmoe_family() {
  return family_instance<Olmoe>();
}

}  // namespace steermoe::model
