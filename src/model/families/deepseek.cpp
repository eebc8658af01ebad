// DeepSeek-V3 as Moonlight uses it: multi-head latent attention (optional q LoRA, a compressed
// kv latent decompressed per head by kv_b), a sigmoid router with a correction bias and
// group-limited top-k, shared experts, dense first layers, a routed scaling factor, YaRN. HF
// model_type "deepseek_v3", GGUF architecture "deepseek2" (whose kv_b_proj is split into
// attn_k_b / attn_v_b: rebuilt at load, split again by the writer).
#include <cstring>

#include "model/family_def.hpp"
#include "model/weights_binder.hpp"

namespace steermoe::model {
namespace {

using Json = nlohmann::json;

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

// kv_b [H * (nope + v), kv_lora] as f32.
std::vector<float> kv_b_f32(const kernels::Matrix& kvb) {
  std::vector<float> v(kvb.rows * kvb.cols);
  for (size_t r = 0; r < kvb.rows; ++r) kernels::dequantize_row(kvb, r, v.data() + r * kvb.cols);
  return v;
}

// GGUF attn_k_b [H, kv_lora, nope] / attn_v_b [H, v, kv_lora] from kv_b [H * (nope + v), kv_lora].
void write_mla_half(const Model& m, const TensorSlot& s, DType dtype, OutputFile& out) {
  const ModelConfig& c = m.config();
  const kernels::Matrix& kvb = m.layer(s.layer).kv_b;
  const auto heads = static_cast<uint64_t>(c.heads),
             lora = static_cast<uint64_t>(c.mla.kv_lora_rank);
  const auto nope = static_cast<uint64_t>(c.mla.qk_nope_head_dim),
             vd = static_cast<uint64_t>(c.mla.v_head_dim);
  if (model_dtype(kvb.dtype) != dtype || kernels::dtype_is_block(kvb.dtype) ||
      kvb.dtype == kernels::DType::kF8E4M3) {
    // Through f32: rearrange, then encode each half as `dtype`.
    const std::vector<float> v = kv_b_f32(kvb);
    std::vector<float> half;
    half.reserve(heads * lora * (s.role == Role::kVB ? vd : nope));
    for (uint64_t h = 0; h < heads; ++h) {
      if (s.role == Role::kVB) {
        const float* base = v.data() + (h * (nope + vd) + nope) * lora;
        half.insert(half.end(), base, base + vd * lora);
      } else {
        for (uint64_t col = 0; col < lora; ++col) {
          for (uint64_t r = 0; r < nope; ++r) half.push_back(v[(h * (nope + vd) + r) * lora + col]);
        }
      }
    }
    std::vector<std::byte> bytes(*dtype_byte_size(dtype, half.size()));
    convert_from_f32(dtype, half, bytes, s.name);
    out.write(bytes);
    return;
  }
  const uint64_t es = kernels::dtype_size(kvb.dtype);
  const auto* base = static_cast<const std::byte*>(kvb.data);
  if (s.role == Role::kVB) {
    for (uint64_t h = 0; h < heads; ++h)
      out.write(base + (h * (nope + vd) + nope) * lora * es, vd * lora * es);
    return;
  }
  std::vector<std::byte> head(lora * nope * es);
  for (uint64_t h = 0; h < heads; ++h) {
    for (uint64_t col = 0; col < lora; ++col) {
      for (uint64_t r = 0; r < nope; ++r) {
        std::memcpy(&head[(col * nope + r) * es], base + ((h * (nope + vd) + r) * lora + col) * es,
                    es);
      }
    }
    out.write(head.data(), head.size());
  }
}

constexpr std::string_view kHfTypes[] = {"deepseek_v3"};
constexpr std::string_view kGgufArchs[] = {"deepseek2"};
constexpr std::string_view kShapes[] = {"Moonlight-16B-A3B"};
constexpr std::string_view kSmallShapes[] = {"deepseek-small"};

class Deepseek final : public FamilyDef {
 public:
  Deepseek()
      : FamilyDef({.id = Family::kDeepseekV3,
                   .name = "deepseek",
                   .hf_types = kHfTypes,
                   .gguf_archs = kGgufArchs,
                   .attention = Mixer::kMla,
                   .pregate_window = 4,
                   .shapes = kShapes,
                   .small_shapes = kSmallShapes}) {}

  void from_hf(const HfFields& f, ModelConfig& c, std::string_view /*model_type*/) const override {
    using L = ConfigLimits;
    fill_common(f, c);
    c.kv_heads = c.heads;  // keys and values are decompressed per head
    apply_rope(f, c, 10000.0);
    c.rope = f.boolean_or("rope_interleave", true) ? RopeKind::kInterleaved : RopeKind::kNeox;
    c.mla.q_lora_rank = static_cast<int>(f.integer_or("q_lora_rank", 0, 0, L::kMaxLoraRank));
    c.mla.kv_lora_rank = static_cast<int>(f.integer("kv_lora_rank", 1, L::kMaxLoraRank));
    c.mla.qk_nope_head_dim = static_cast<int>(f.integer("qk_nope_head_dim", 1, L::kMaxHeadDim));
    c.mla.qk_rope_head_dim = static_cast<int>(f.integer("qk_rope_head_dim", 2, L::kMaxHeadDim));
    c.mla.v_head_dim = static_cast<int>(f.integer("v_head_dim", 1, L::kMaxHeadDim));
    c.mla.lora_norm_eps = 1e-6f;  // transformers builds q_a/kv_a_layernorm with the default eps
    c.experts = static_cast<int>(
        f.integer_any({"n_routed_experts", "num_local_experts"}, 1, L::kMaxExperts));
    c.top_k = static_cast<int>(f.integer("num_experts_per_tok", 1, L::kMaxExperts));
    c.expert_ffn = static_cast<int>(f.integer("moe_intermediate_size", 1, L::kMaxFfn));
    c.dense_ffn = static_cast<int>(f.integer("intermediate_size", 1, L::kMaxFfn));
    const int64_t shared = f.integer_or("n_shared_experts", 0, 0, L::kMaxExperts);
    if (shared * c.expert_ffn > L::kMaxFfn) {
      fail(f.where(), "n_shared_experts",
           "n_shared_experts x moe_intermediate_size must be <= {}, found {}", L::kMaxFfn,
           shared * c.expert_ffn);
    }
    c.shared_ffn = static_cast<int>(shared * c.expert_ffn);
    c.norm_topk_prob = f.boolean_or("norm_topk_prob", false);
    c.routed_scaling_factor = static_cast<float>(f.number_or("routed_scaling_factor", 1.0));
    c.n_group = static_cast<int>(f.integer_or("n_group", 1, 1, L::kMaxExperts));
    c.topk_group = static_cast<int>(f.integer_or("topk_group", 1, 1, L::kMaxExperts));
    const std::string scoring = f.string_or("scoring_func", "sigmoid");
    if (scoring == "sigmoid") {
      c.router = RouterScore::kSigmoid;
    } else if (scoring == "softmax") {
      c.router = RouterScore::kSoftmax;
    } else {
      fail(f.where(), "scoring_func", "expected \"sigmoid\" or \"softmax\", found \"{}\"", scoring);
    }
    const std::string method = f.string_or("topk_method", "noaux_tc");
    if (method != "noaux_tc" && method != "greedy" && method != "group_limited_greedy") {
      fail(f.where(), "topk_method",
           "expected \"noaux_tc\", \"greedy\" or \"group_limited_greedy\", found \"{}\"", method);
    }
    c.correction_bias = method == "noaux_tc" && c.router == RouterScore::kSigmoid;
    if (method == "greedy") c.n_group = c.topk_group = 1;
    const int64_t first_dense = f.integer_or("first_k_dense_replace", 0, 0, L::kMaxLayers);
    const int64_t freq = f.integer_or("moe_layer_freq", 1, 1, L::kMaxLayers);
    c.moe_layer.assign(static_cast<size_t>(c.layers), 0);
    for (int l = 0; l < c.layers; ++l) {
      c.moe_layer[static_cast<size_t>(l)] = l >= first_dense && l % freq == 0;
    }
  }

  void from_gguf(const GgufFile& f, ModelConfig& c, bool /*dense*/) const override {
    const std::string& p = c.gguf_prefix;
    // MLA is stored as MQA (head_count_kv 1, key_length = kv_lora + rope); we decompress per
    // head, so kv heads = heads. Per-head sizes come from the *_mla keys.
    c.kv_heads = c.heads;
    c.mla.q_lora_rank = gguf_int_or(f, p + "attention.q_lora_rank", 0);
    c.mla.kv_lora_rank = gguf_int(f, p + "attention.kv_lora_rank");
    c.mla.qk_rope_head_dim = gguf_int(f, p + "rope.dimension_count");
    const int key_mla = gguf_int(f, p + "attention.key_length_mla");
    c.mla.qk_nope_head_dim = key_mla - c.mla.qk_rope_head_dim;
    c.mla.v_head_dim = gguf_int(f, p + "attention.value_length_mla");
    c.mla.lora_norm_eps = c.rms_eps;  // llama.cpp uses the model eps for the latent norms
    c.rope = RopeKind::kInterleaved;
    c.expert_ffn = gguf_int(f, p + "expert_feed_forward_length");
    c.dense_ffn = gguf_int(f, p + "feed_forward_length");
    const int64_t shared =
        static_cast<int64_t>(gguf_int_or(f, p + "expert_shared_count", 0)) * c.expert_ffn;
    if (shared > ConfigLimits::kMaxFfn) {
      fail(f.name(), p + "expert_shared_count",
           "shared experts x expert FFN must be <= {}, found {}", ConfigLimits::kMaxFfn, shared);
    }
    c.shared_ffn = static_cast<int>(shared);
    const int dense_lead = gguf_int_or(f, p + "leading_dense_block_count", 0);
    for (int l = 0; l < std::min(dense_lead, c.layers); ++l)
      c.moe_layer[static_cast<size_t>(l)] = 0;
    const int gating = gguf_int_or(f, p + "expert_gating_func", 1);
    if (gating != 1 && gating != 2) {
      fail(f.name(), p + "expert_gating_func", "expected 1 (softmax) or 2 (sigmoid), found {}",
           gating);
    }
    c.router = gating == 2 ? RouterScore::kSigmoid : RouterScore::kSoftmax;
    c.norm_topk_prob = f.find_bool(p + "expert_weights_norm").value_or(false);
    c.routed_scaling_factor =
        static_cast<float>(f.find_float(p + "expert_weights_scale").value_or(1.0));
    c.n_group = gguf_int_or(f, p + "expert_group_count", 1);
    c.topk_group = gguf_int_or(f, p + "expert_group_used_count", c.n_group);
    if (c.n_group == 0) c.n_group = 1;
    if (c.topk_group == 0) c.topk_group = c.n_group;
    c.correction_bias = f.has_tensor("blk." + std::to_string(dense_lead) + ".exp_probs_b.bias");
  }

  void to_hf(const ModelConfig& c, Json& j) const override {
    j["model_type"] = "deepseek_v3";
    j["architectures"] = {"DeepseekV3ForCausalLM"};
    j["num_key_value_heads"] = c.heads;
    j["q_lora_rank"] = c.mla.q_lora_rank > 0 ? Json(c.mla.q_lora_rank) : Json(nullptr);
    j["kv_lora_rank"] = c.mla.kv_lora_rank;
    j["qk_nope_head_dim"] = c.mla.qk_nope_head_dim;
    j["qk_rope_head_dim"] = c.mla.qk_rope_head_dim;
    j["v_head_dim"] = c.mla.v_head_dim;
    j["rope_interleave"] = c.rope == RopeKind::kInterleaved;
    j["n_routed_experts"] = c.experts;
    j["moe_intermediate_size"] = c.expert_ffn;
    j["intermediate_size"] = c.dense_ffn;
    j["n_shared_experts"] = c.expert_ffn > 0 ? c.shared_ffn / c.expert_ffn : 0;
    j["routed_scaling_factor"] = c.routed_scaling_factor;
    j["n_group"] = c.n_group;
    j["topk_group"] = c.topk_group;
    j["scoring_func"] = c.router == RouterScore::kSigmoid ? "sigmoid" : "softmax";
    j["topk_method"] = c.correction_bias ? "noaux_tc" : "greedy";
    int first_dense = 0;
    while (first_dense < c.layers && !c.moe_layer[static_cast<size_t>(first_dense)]) ++first_dense;
    j["first_k_dense_replace"] = first_dense;
    j["moe_layer_freq"] = 1;
  }

  void to_gguf(const ModelConfig& c, GgufKv& kv) const override {
    const MlaConfig& m = c.mla;
    int dense_lead = 0;
    while (dense_lead < c.layers && !c.moe_layer[static_cast<size_t>(dense_lead)]) ++dense_lead;
    kv.u32("feed_forward_length", c.dense_ffn);
    kv.u32("attention.head_count_kv", 1);
    kv.u32("attention.key_length", m.kv_lora_rank + m.qk_rope_head_dim);
    kv.u32("attention.value_length", m.kv_lora_rank);
    kv.u32("attention.key_length_mla", m.qk_nope_head_dim + m.qk_rope_head_dim);
    kv.u32("attention.value_length_mla", m.v_head_dim);
    kv.u32("attention.q_lora_rank", m.q_lora_rank);
    kv.u32("attention.kv_lora_rank", m.kv_lora_rank);
    kv.u32("rope.dimension_count", m.qk_rope_head_dim);
    kv.u32("leading_dense_block_count", dense_lead);
    kv.u32("expert_feed_forward_length", c.expert_ffn);
    kv.u32("expert_shared_count", c.expert_ffn > 0 ? c.shared_ffn / c.expert_ffn : 0);
    kv.f32("expert_weights_scale", c.routed_scaling_factor);
    kv.boolean("expert_weights_norm", c.norm_topk_prob);
    kv.u32("expert_gating_func", c.router == RouterScore::kSigmoid ? 2 : 1);
    if (c.n_group > 1) {
      kv.u32("expert_group_count", c.n_group);
      kv.u32("expert_group_used_count", c.topk_group);
    }
  }

  void layout_mixer(LayoutBuilder& b, const ModelConfig& c, int l) const override {
    using U = uint64_t;
    const U H = static_cast<U>(c.hidden), heads = static_cast<U>(c.heads);
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
  }

  void bind_mixer(WeightBinder& b, const ModelConfig& c, int l, LayerWeights& w) const override {
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

  // The GGUF halves are rebuilt from kv_b; every other slot is the generic writer's.
  bool produce(const Model& m, const TensorSlot& s, DType dtype, OutputFile& out) const override {
    if (s.role != Role::kKB && s.role != Role::kVB) return false;
    write_mla_half(m, s, dtype, out);
    return true;
  }

  std::optional<DType> stored_dtype(const Model& m, const TensorSlot& s) const override {
    if (s.role != Role::kKB && s.role != Role::kVB) return std::nullopt;
    return model_dtype(m.layer(s.layer).kv_b.dtype);
  }

  bool shape(std::string_view name, ModelConfig& c) const override {
    if (name != "Moonlight-16B-A3B" && name != "deepseek-small") return false;
    const bool small = name == "deepseek-small";
    c.family = Family::kDeepseekV3;
    c.vocab = small ? 300 : 163840;
    c.hidden = small ? 64 : 2048;
    c.layers = small ? 3 : 27;
    c.heads = c.kv_heads = small ? 4 : 16;
    c.rms_eps = small ? 1e-6f : 1e-5f;
    c.rope_theta = small ? 10000.0f : 50000.0f;
    c.rope = RopeKind::kInterleaved;
    c.max_positions = small ? 4096 : 8192;
    c.mla = {.q_lora_rank = 0,
             .kv_lora_rank = small ? 32 : 512,
             .qk_nope_head_dim = small ? 16 : 128,
             .qk_rope_head_dim = small ? 8 : 64,
             .v_head_dim = small ? 16 : 128,
             .lora_norm_eps = 1e-6f};
    c.experts = small ? 16 : 64;
    c.top_k = 6;
    c.expert_ffn = small ? 32 : 1408;
    c.shared_ffn = 2 * c.expert_ffn;
    c.dense_ffn = small ? 96 : 11264;
    c.router = RouterScore::kSigmoid;
    c.norm_topk_prob = true;
    c.routed_scaling_factor = 2.446f;
    c.correction_bias = true;
    c.bos_token = small ? 297 : 163584;
    c.eos_token = small ? 296 : 163586;
    c.moe_layer.assign(static_cast<size_t>(c.layers), 1);
    c.moe_layer[0] = 0;
    return true;
  }
};

}  // namespace

const FamilyDef& deepseek_family() {
  return family_instance<Deepseek>();
}

}  // namespace steermoe::model
