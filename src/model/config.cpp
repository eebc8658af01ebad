#include "model/config.hpp"

#include <fmt/format.h>

#include <cmath>

#include "common/error.hpp"
#include "model/family_def.hpp"
#include "model/gguf.hpp"

namespace steermoe::model {

std::string_view family_name(Family family) { return family_def(family).name; }

std::string_view family_name(const ModelConfig& config) {
  const FamilyDef& def = family_def(config.family);
  if (!config.has_moe() && !def.dense_name.empty()) return def.dense_name;
  return def.name;
}

bool is_hybrid(Family family) { return family_def(family).hybrid; }

namespace {
bool uses_mla(Family family) { return family_def(family).attention == Mixer::kMla; }
}  // namespace

int ModelConfig::linear_layer_count() const {
  int n = 0;
  for (uint8_t m : linear_layer) n += m != 0;
  return n;
}

int ModelConfig::rotary_dim() const {
  if (uses_mla(family)) return mla.qk_rope_head_dim;
  return rope_dim > 0 ? rope_dim : head_dim;
}

namespace {

// transformers' get_mscale / yarn_get_mscale.
double yarn_mscale(double scale, double mscale) {
  if (scale <= 1.0) return 1.0;
  return 0.1 * mscale * std::log(scale) + 1.0;
}

}  // namespace

std::vector<float> ModelConfig::rope_inv_freq() const {
  const int dim = rotary_dim();
  const size_t half = static_cast<size_t>(std::max(dim, 0) / 2);
  // pos_freqs = base ** (arange(0, dim, 2).float() / dim) in fp32 (the same expression as the
  // kernel's default angles).
  std::vector<float> pos_freqs(half);
  for (size_t i = 0; i < half; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(dim);
    pos_freqs[i] = static_cast<float>(std::pow(static_cast<double>(rope_theta), exponent));
  }
  std::vector<float> inv(half);
  if (rope_scaling.kind == RopeScalingKind::kNone) {
    for (size_t i = 0; i < half; ++i) inv[i] = 1.0f / pos_freqs[i];
    return inv;
  }
  // YaRN (modeling_rope_utils._compute_yarn_parameters): the correction range in double, the
  // ramp and the blend in fp32.
  const RopeScaling& y = rope_scaling;
  const double base = rope_theta;
  const double orig = y.original_max_positions;
  auto correction_dim = [&](double rotations) {
    return (dim * std::log(orig / (rotations * 2.0 * M_PI))) / (2.0 * std::log(base));
  };
  double low = correction_dim(y.beta_fast);
  double high = correction_dim(y.beta_slow);
  if (y.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;
  const auto lo_f = static_cast<float>(low);
  const auto span_f = static_cast<float>(high - low);
  for (size_t i = 0; i < half; ++i) {
    const float extrapolation = 1.0f / pos_freqs[i];
    const float interpolation = 1.0f / (y.factor * pos_freqs[i]);
    float ramp = (static_cast<float>(i) - lo_f) / span_f;
    ramp = std::min(std::max(ramp, 0.0f), 1.0f);
    const float extrapolation_factor = 1.0f - ramp;
    inv[i] = interpolation * (1.0f - extrapolation_factor) + extrapolation * extrapolation_factor;
  }
  return inv;
}

float ModelConfig::rope_attention_factor() const {
  if (rope_scaling.kind == RopeScalingKind::kNone) return 1.0f;
  const RopeScaling& y = rope_scaling;
  if (y.attention_factor > 0.0f) return y.attention_factor;
  if (y.mscale != 0.0f && y.mscale_all_dim != 0.0f) {
    return static_cast<float>(yarn_mscale(y.factor, y.mscale) / yarn_mscale(y.factor, y.mscale_all_dim));
  }
  return static_cast<float>(yarn_mscale(y.factor, 1.0));
}

int ModelConfig::moe_layer_count() const {
  int n = 0;
  for (uint8_t m : moe_layer) n += m != 0;
  return n;
}

std::vector<int> ModelConfig::moe_index() const {
  std::vector<int> index(moe_layer.size(), -1);
  int next = 0;
  for (size_t l = 0; l < moe_layer.size(); ++l) {
    if (moe_layer[l]) index[l] = next++;
  }
  return index;
}

int ModelConfig::q_head_dim() const {
  return uses_mla(family) ? mla.qk_nope_head_dim + mla.qk_rope_head_dim : head_dim;
}

int ModelConfig::v_dim() const {
  return uses_mla(family) ? mla.v_head_dim : head_dim;
}

float ModelConfig::attention_scale() const {
  if (uses_mla(family) && rope_scaling.kind != RopeScalingKind::kNone &&
      rope_scaling.mscale_all_dim != 0.0f) {
    // DeepseekV3Attention: scaling = qk_head_dim**-0.5 * mscale**2 (in double).
    const double m = yarn_mscale(rope_scaling.factor, rope_scaling.mscale_all_dim);
    return static_cast<float>(std::pow(static_cast<double>(q_head_dim()), -0.5) * m * m);
  }
  return 1.0f / std::sqrt(static_cast<float>(q_head_dim()));
}

namespace {

void check_range(const std::string& where, const std::string& field, int64_t value, int64_t lo,
                 int64_t hi) {
  if (value < lo || value > hi) {
    fail(where, field, "expected an integer in [{}, {}], found {}", lo, hi, value);
  }
}

// The GGUF metadata key (without the "<arch>." prefix where it has one) a config.json field is
// read from in config_from_gguf.
std::string gguf_key_of(std::string_view hf_field, const std::string& prefix) {
  struct Pair {
    std::string_view hf, gguf;
    bool prefixed;
  };
  static constexpr Pair kKeys[] = {
      {"vocab_size", "vocab_size (or the rows of token_embd.weight)", true},
      {"hidden_size", "embedding_length", true},
      {"num_hidden_layers", "block_count", true},
      {"num_attention_heads", "attention.head_count", true},
      {"num_key_value_heads", "attention.head_count_kv", true},
      {"max_position_embeddings", "context_length", true},
      {"rms_norm_eps", "attention.layer_norm_rms_epsilon", true},
      {"rope_theta", "rope.freq_base", true},
      {"q_lora_rank", "attention.q_lora_rank", true},
      {"kv_lora_rank", "attention.kv_lora_rank", true},
      {"qk_nope_head_dim", "attention.key_length_mla - rope.dimension_count", true},
      {"qk_rope_head_dim", "rope.dimension_count", true},
      {"v_head_dim", "attention.value_length_mla", true},
      {"head_dim", "attention.key_length", true},
      {"layers", "block_count / leading_dense_block_count", true},
      {"num_experts", "expert_count", true},
      {"num_experts_per_tok", "expert_used_count", true},
      {"moe_intermediate_size", "expert_feed_forward_length", true},
      {"shared expert intermediate size", "expert_shared_count", true},
      {"intermediate_size", "feed_forward_length", true},
      {"n_group", "expert_group_count", true},
      {"topk_group", "expert_group_used_count", true},
      {"routed_scaling_factor", "expert_weights_scale", true},
      {"bos_token_id", "tokenizer.ggml.bos_token_id", false},
      {"eos_token_id", "tokenizer.ggml.eos_token_id", false},
  };
  for (const Pair& p : kKeys) {
    if (p.hf == hf_field) {
      return "metadata key '" + (p.prefixed ? prefix : std::string()) + std::string(p.gguf) + "'";
    }
  }
  return std::string(hf_field);
}

}  // namespace

void ModelConfig::validate() const {
  const std::string& w = source;
  using L = ConfigLimits;
  // Field names in the source's own vocabulary: HF config.json names, or GGUF keys.
  const auto check_range = [this](const std::string& where, const char* field, int64_t value,
                                  int64_t lo, int64_t hi) {
    ::steermoe::model::check_range(
        where, gguf_prefix.empty() ? std::string(field) : gguf_key_of(field, gguf_prefix), value,
        lo, hi);
  };
  const auto fail = [this](const std::string& where, const char* field, std::string_view what,
                           const auto&... args) {
    ::steermoe::fail(where,
                     gguf_prefix.empty() ? std::string(field) : gguf_key_of(field, gguf_prefix),
                     "{}", fmt::vformat(what, fmt::make_format_args(args...)));
  };
  check_range(w, "vocab_size", vocab, 1, L::kMaxVocab);
  check_range(w, "hidden_size", hidden, 1, L::kMaxHidden);
  check_range(w, "num_hidden_layers", layers, 1, L::kMaxLayers);
  check_range(w, "num_attention_heads", heads, 1, L::kMaxHeads);
  check_range(w, "num_key_value_heads", kv_heads, 1, heads);
  if (heads % kv_heads != 0) {
    fail(w, "num_key_value_heads", "expected a divisor of num_attention_heads ({}), found {}",
         heads, kv_heads);
  }
  check_range(w, "max_position_embeddings", max_positions, 1, int64_t{1} << 24);
  if (!(rms_eps > 0.0f && rms_eps < 1.0f)) {
    fail(w, "rms_norm_eps", "expected a value in (0, 1), found {}", rms_eps);
  }
  if (!(rope_theta > 0.0f && std::isfinite(rope_theta))) {
    fail(w, "rope_theta", "expected a positive finite value, found {}", rope_theta);
  }
  if (uses_mla(family)) {
    check_range(w, "q_lora_rank", mla.q_lora_rank, 0, L::kMaxLoraRank);
    check_range(w, "kv_lora_rank", mla.kv_lora_rank, 1, L::kMaxLoraRank);
    check_range(w, "qk_nope_head_dim", mla.qk_nope_head_dim, 1, L::kMaxHeadDim);
    check_range(w, "qk_rope_head_dim", mla.qk_rope_head_dim, 2, L::kMaxHeadDim);
    check_range(w, "v_head_dim", mla.v_head_dim, 1, L::kMaxHeadDim);
    if (mla.qk_rope_head_dim % 2 != 0) {
      fail(w, "qk_rope_head_dim", "expected an even number, found {}", mla.qk_rope_head_dim);
    }
  } else {
    check_range(w, "head_dim", head_dim, 2, L::kMaxHeadDim);
    if (head_dim % 2 != 0) fail(w, "head_dim", "expected an even number, found {}", head_dim);
  }
  if (moe_layer.size() != static_cast<size_t>(layers)) {
    fail(w, "moe layers", "expected one flag per layer ({}), found {}", layers, moe_layer.size());
  }
  if (!has_moe()) {
    // Only a family with a dense variant (Qwen3) has no MoE layer; it has no expert either (a
    // Qwen3-MoE config whose every layer is in mlp_only_layers still names experts and is
    // refused here).
    if (family_def(family).dense_name.empty() || experts != 0) {
      fail(w, "layers", "expected at least one MoE layer, found none");
    }
    if (top_k != 0 || expert_ffn != 0 || shared_ffn != 0 || n_group != 1 || topk_group != 1) {
      fail(w, "experts", "expected no expert settings in a dense model");
    }
  } else {
    check_range(w, "num_experts", experts, 1, L::kMaxExperts);
    check_range(w, "num_experts_per_tok", top_k, 1, experts);
    check_range(w, "moe_intermediate_size", expert_ffn, 1, L::kMaxFfn);
    check_range(w, "shared expert intermediate size", shared_ffn, 0, L::kMaxFfn);
    check_range(w, "n_group", n_group, 1, experts);
    if (experts % n_group != 0) {
      fail(w, "n_group", "expected a divisor of the expert count ({}), found {}", experts, n_group);
    }
    check_range(w, "topk_group", topk_group, 1, n_group);
    if (n_group > 1 && top_k > topk_group * (experts / n_group)) {
      fail(w, "topk_group", "the kept groups ({} x {} experts) must hold top_k = {} experts",
           topk_group, experts / n_group, top_k);
    }
  }
  if (moe_layer_count() < layers) check_range(w, "intermediate_size", dense_ffn, 1, L::kMaxFfn);
  if (!(routed_scaling_factor > 0.0f && std::isfinite(routed_scaling_factor))) {
    fail(w, "routed_scaling_factor", "expected a positive finite value, found {}",
         routed_scaling_factor);
  }
  if (!(clip_qkv >= 0.0f && std::isfinite(clip_qkv))) {
    fail(w, "clip_qkv", "expected null or a positive finite value, found {}", clip_qkv);
  }
  check_range(w, "rotary dims (partial_rotary_factor)", rotary_dim(), 2,
              uses_mla(family) ? mla.qk_rope_head_dim : head_dim);
  if (rotary_dim() % 2 != 0) {
    fail(w, "partial_rotary_factor", "expected an even number of rotated dims, found {}",
         rotary_dim());
  }
  if (rope_scaling.kind == RopeScalingKind::kYarn) {
    const RopeScaling& y = rope_scaling;
    if (!(y.factor >= 1.0f && std::isfinite(y.factor) && y.factor <= 1e6f)) {
      fail(w, "rope_parameters.factor", "expected a finite value in [1, 1e6], found {}", y.factor);
    }
    check_range(w, "rope_parameters.original_max_position_embeddings", y.original_max_positions, 1,
                int64_t{1} << 24);
    for (const auto& [name, v] : {std::pair{"rope_parameters.beta_fast", y.beta_fast},
                                  std::pair{"rope_parameters.beta_slow", y.beta_slow}}) {
      if (!(v > 0.0f && std::isfinite(v))) fail(w, name, "expected a positive finite value, found {}", v);
    }
    for (const auto& [name, v] : {std::pair{"rope_parameters.mscale", y.mscale},
                                  std::pair{"rope_parameters.mscale_all_dim", y.mscale_all_dim},
                                  std::pair{"rope_parameters.attention_factor", y.attention_factor}}) {
      if (!(v >= 0.0f && std::isfinite(v) && v <= 1e3f)) {
        fail(w, name, "expected a finite value in [0, 1000], found {}", v);
      }
    }
  }
  if (is_hybrid(family)) {
    if (linear_layer.size() != static_cast<size_t>(layers)) {
      fail(w, "layer_types", "expected one entry per layer ({}), found {}", layers,
           linear_layer.size());
    }
    if (linear_layer_count() > 0) {
      const LinearAttnConfig& a = linear;
      check_range(w, "linear_conv_kernel_dim", a.conv_kernel, 1, L::kMaxConvKernel);
      check_range(w, "linear_num_key_heads", a.k_heads, 1, L::kMaxHeads);
      check_range(w, "linear_num_value_heads", a.v_heads, 1, L::kMaxHeads);
      check_range(w, "linear_key_head_dim", a.k_head_dim, 1, L::kMaxHeadDim);
      check_range(w, "linear_value_head_dim", a.v_head_dim, 1, L::kMaxHeadDim);
      if (a.v_heads % a.k_heads != 0) {
        fail(w, "linear_num_value_heads", "expected a multiple of linear_num_key_heads ({}), found {}",
             a.k_heads, a.v_heads);
      }
      if (static_cast<int64_t>(a.conv_dim()) > L::kMaxFfn) {
        fail(w, "linear attention", "2 * key dims + value dims must be <= {}, found {}",
             L::kMaxFfn, a.conv_dim());
      }
    }
  } else if (!linear_layer.empty()) {
    fail(w, "layer_types", "linear attention layers need a qwen3_next or qwen3_5_moe model");
  }
  if (bos_token >= vocab)
    fail(w, "bos_token_id", "expected < vocab_size {}, found {}", vocab, bos_token);
  if (eos_token >= vocab)
    fail(w, "eos_token_id", "expected < vocab_size {}, found {}", vocab, eos_token);
}

std::string ModelConfig::summary() const {
  if (!has_moe()) {
    return fmt::format(
        "{}: {} layers (dense, no experts), hidden {}, vocab {}, heads {}/{} x {}, "
        "ffn {}{}",
        family_name(*this), layers, hidden, vocab, heads, kv_heads, head_dim, dense_ffn,
        tied_embeddings ? ", tied embeddings" : "");
  }
  std::string s = fmt::format(
      "{}: {} layers ({} MoE), hidden {}, vocab {}, heads {}/{}, {} experts top-{} (ffn {}), "
      "router {}{}",
      family_name(family), layers, moe_layer_count(), hidden, vocab, heads, kv_heads, experts,
      top_k, expert_ffn, router == RouterScore::kSoftmax ? "softmax" : "sigmoid",
      norm_topk_prob ? " renormalised" : "");
  if (is_hybrid(family)) {
    s += fmt::format(", {} Gated DeltaNet layers (conv {}, heads {}/{} x {}/{}), rotary {}/{}",
                     linear_layer_count(), linear.conv_kernel, linear.k_heads, linear.v_heads,
                     linear.k_head_dim, linear.v_head_dim, rotary_dim(), head_dim);
  }
  if (rope_scaling.kind == RopeScalingKind::kYarn) {
    s += fmt::format(", yarn x{} (from {})", rope_scaling.factor, rope_scaling.original_max_positions);
  }
  if (uses_mla(family)) {
    s += fmt::format(", MLA q_lora {} kv_lora {} nope {} rope {} v {}, shared ffn {}, groups {}/{}",
                     mla.q_lora_rank, mla.kv_lora_rank, mla.qk_nope_head_dim, mla.qk_rope_head_dim,
                     mla.v_head_dim, shared_ffn, topk_group, n_group);
  }
  return s;
}

int gguf_int(const GgufFile& f, const std::string& key) {
  uint64_t v = f.get_uint(key);
  if (v > (uint64_t{1} << 30))
    fail(f.name(), "metadata key '" + key + "'", "value {} is too large", v);
  return static_cast<int>(v);
}

int gguf_int_or(const GgufFile& f, const std::string& key, int fallback) {
  if (!f.has(key)) return fallback;
  return gguf_int(f, key);
}


namespace {

// YaRN from "<arch>.rope.scaling.*" (left as none when the type is absent or "none").
void rope_scaling_from_gguf(const GgufFile& f, const std::string& p, RopeScaling& y) {
  const auto type = f.find_string(p + "rope.scaling.type");
  if (!type || *type == "none") return;
  if (*type != "yarn") {
    fail(f.name(), p + "rope.scaling.type", "expected \"none\" or \"yarn\", found \"{}\"", *type);
  }
  y.kind = RopeScalingKind::kYarn;
  y.factor = static_cast<float>(f.get_float(p + "rope.scaling.factor"));
  y.original_max_positions = gguf_int(f, p + "rope.scaling.original_context_length");
  y.beta_fast = static_cast<float>(f.find_float(p + "rope.scaling.yarn_beta_fast").value_or(32.0));
  y.beta_slow = static_cast<float>(f.find_float(p + "rope.scaling.yarn_beta_slow").value_or(1.0));
  // llama.cpp (deepseek2): yarn_log_multiplier = 0.1 * mscale_all_dim; the rope's own mscale
  // is taken equal (attention factor 1) unless attn_factor says otherwise.
  const double log_mul = f.find_float(p + "rope.scaling.yarn_log_multiplier").value_or(0.0);
  if (log_mul != 0.0) y.mscale = y.mscale_all_dim = static_cast<float>(log_mul / 0.1);
  y.attention_factor =
      static_cast<float>(f.find_float(p + "rope.scaling.attn_factor").value_or(0.0));
}

}  // namespace

ModelConfig config_from_gguf(const GgufFile& f) {
  ModelConfig c;
  c.source = f.name();
  const std::string arch = f.get_string("general.architecture");
  const std::string p = arch + ".";
  const FamilyDef* def = nullptr;
  std::vector<std::string> known;
  for (const FamilyDef* d : family_defs()) {
    for (const std::string_view a : d->gguf_archs) {
      if (a == arch) def = d;
      known.emplace_back(a);
    }
  }
  if (def == nullptr) {
    fail(f.name(), "general.architecture", "expected {}, found '{}'", join_or(known), arch);
  }
  c.family = def->id;
  const bool dense = arch == def->dense_gguf_arch;  // llama.cpp's dense qwen3 has no expert keys
  c.hidden = gguf_int(f, p + "embedding_length");
  c.gguf_prefix = p;
  c.layers = gguf_int(f, p + "block_count");
  // Checked now: the per-layer tables below are sized by it.
  check_range(f.name(), "metadata key '" + p + "block_count'", c.layers, 1,
              ConfigLimits::kMaxLayers);
  // llama.cpp counts a model's multi-token-prediction layers (Qwen3.5 / Qwen3-Next, GLM-4.5,
  // DeepSeek-V3 MTP) in block_count and their number in nextn_predict_layers: they follow the
  // model's own layers, and steermoe neither runs nor reads them.
  if (const auto nextn = f.find_uint(p + "nextn_predict_layers")) {
    if (*nextn >= static_cast<uint64_t>(c.layers)) {
      fail(f.name(), "metadata key '" + p + "nextn_predict_layers'",
           "expected fewer than block_count ({}), found {}", c.layers, *nextn);
    }
    c.layers -= static_cast<int>(*nextn);
  }
  c.heads = gguf_int(f, p + "attention.head_count");
  c.kv_heads = gguf_int_or(f, p + "attention.head_count_kv", c.heads);
  c.max_positions = gguf_int_or(f, p + "context_length", 4096);
  c.rms_eps = static_cast<float>(f.get_float(p + "attention.layer_norm_rms_epsilon"));
  c.rope_theta = static_cast<float>(f.find_float(p + "rope.freq_base").value_or(10000.0));
  if (!dense) {
    c.experts = gguf_int(f, p + "expert_count");
    c.top_k = gguf_int(f, p + "expert_used_count");
  }
  if (f.has(p + "vocab_size")) {
    c.vocab = gguf_int(f, p + "vocab_size");
  } else if (auto embd = f.find_tensor_info("token_embd.weight"); embd && embd->shape.size() == 2) {
    c.vocab = static_cast<int>(std::min<uint64_t>(embd->shape[0], uint64_t{1} << 30));
  } else if (f.has("tokenizer.ggml.tokens")) {
    c.vocab = static_cast<int>(f.get_array("tokenizer.ggml.tokens").items.size());
  }
  c.tied_embeddings = !f.has_tensor("output.weight");
  if (auto bos = f.find_uint("tokenizer.ggml.bos_token_id")) c.bos_token = static_cast<int>(*bos);
  if (auto eos = f.find_uint("tokenizer.ggml.eos_token_id")) c.eos_token = static_cast<int>(*eos);
  c.moe_layer.assign(static_cast<size_t>(std::max(c.layers, 0)), dense ? 0 : 1);
  rope_scaling_from_gguf(f, p, c.rope_scaling);
  def->from_gguf(f, c, dense);
  c.validate();
  return c;
}

}  // namespace steermoe::model
