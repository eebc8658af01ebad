#include "model/hf_config.hpp"

#include <fmt/format.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/error.hpp"
#include "common/input_file.hpp"
#include "common/json_input.hpp"

namespace steermoe::model {

namespace {

using Json = nlohmann::json;

// Typed access to one config.json object with messages "<file>: <field>: expected ...".
class Fields {
 public:
  Fields(const Json& j, const std::string& where) : j_(j), where_(where) {}

  bool has(const char* key) const { return j_.contains(key) && !j_.at(key).is_null(); }

  int64_t integer(const char* key, int64_t lo, int64_t hi) const {
    if (!has(key)) fail(where_, key, "missing (expected an integer in [{}, {}])", lo, hi);
    return integer_value(j_.at(key), key, lo, hi);
  }
  int64_t integer_or(const char* key, int64_t fallback, int64_t lo, int64_t hi) const {
    return has(key) ? integer(key, lo, hi) : fallback;
  }
  double number(const char* key) const {
    if (!has(key)) fail(where_, key, "missing (expected a number)");
    return number_value(j_.at(key), key);
  }
  double number_or(const char* key, double fallback) const {
    return has(key) ? number(key) : fallback;
  }
  bool boolean_or(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    const Json& v = j_.at(key);
    if (!v.is_boolean()) fail(where_, key, "expected true or false, found {}", json_excerpt(v));
    return v.get<bool>();
  }
  std::string string_or(const char* key, const std::string& fallback) const {
    if (!has(key)) return fallback;
    const Json& v = j_.at(key);
    if (!v.is_string()) fail(where_, key, "expected a string, found {}", json_excerpt(v));
    return v.get<std::string>();
  }
  // A token id or a list of token ids (first one used); -1 when absent.
  int token_or_none(const char* key, int64_t vocab) const {
    if (!has(key)) return -1;
    const Json& v = j_.at(key);
    if (v.is_array()) {
      // A list (several end tokens): every entry must be a token id, not just the first.
      if (v.empty()) return -1;
      if (v.size() > 1024) fail(where_, key, "expected at most 1024 token ids, found {}", v.size());
      for (const Json& item : v) {
        if (!item.is_number_integer()) {
          fail(where_, key, "expected a list of integer token ids, found {}", json_excerpt(v));
        }
        integer_value(item, key, 0, vocab - 1);
      }
      return static_cast<int>(integer_value(v.at(0), key, 0, vocab - 1));
    }
    return static_cast<int>(integer_value(v, key, 0, vocab - 1));
  }
  const Json& raw(const char* key) const { return j_.at(key); }
  const std::string& where() const { return where_; }

  int64_t integer_value(const Json& v, const char* key, int64_t lo, int64_t hi) const {
    int64_t value = 0;
    if (v.is_number_integer()) {
      if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(hi)) {
        fail(where_, key, "expected an integer in [{}, {}], found {}", lo, hi, json_excerpt(v));
      }
      value = v.get<int64_t>();
    } else if (v.is_number_float()) {
      const double d = v.get<double>();
      if (!(std::isfinite(d) && d == std::floor(d) && d >= static_cast<double>(lo) &&
            d <= static_cast<double>(hi))) {
        fail(where_, key, "expected an integer in [{}, {}], found {}", lo, hi, json_excerpt(v));
      }
      value = static_cast<int64_t>(d);
    } else {
      fail(where_, key, "expected an integer in [{}, {}], found {}", lo, hi, json_excerpt(v));
    }
    if (value < lo || value > hi) {
      fail(where_, key, "expected an integer in [{}, {}], found {}", lo, hi, value);
    }
    return value;
  }
  double number_value(const Json& v, const char* key) const {
    if (!v.is_number()) fail(where_, key, "expected a number, found {}", json_excerpt(v));
    const double d = v.get<double>();
    if (!std::isfinite(d)) fail(where_, key, "expected a finite number, found {}", json_excerpt(v));
    return d;
  }

 private:
  const Json& j_;
  const std::string& where_;
};

// A count that transformers' configuration classes accept under several names (attribute_map):
// the first present key wins; the message names every accepted spelling.
int64_t integer_any(const Fields& f, std::initializer_list<const char*> keys, int64_t lo,
                    int64_t hi) {
  for (const char* k : keys) {
    if (f.has(k)) return f.integer(k, lo, hi);
  }
  std::string names;
  for (const char* k : keys) names += names.empty() ? k : std::string(" or ") + k;
  fail(f.where(), names, "missing (expected an integer in [{}, {}])", lo, hi);
}

struct RopeFields {
  float theta = 10000.0f;
  double partial_rotary_factor = 1.0;
  RopeScaling scaling;
};

// RoPE settings as transformers resolves them (PreTrainedConfig.convert_rope_params_to_dict and
// standardize_rope_params): `rope_scaling` (v4) or `rope_parameters` (v5) holds the type and the
// scaling fields; rope_theta and partial_rotary_factor may sit inside it or at the top level.
// Types: "default" and "yarn" (anything else is refused with the accepted set).
RopeFields rope_of(const Fields& f, double default_theta, double default_partial) {
  RopeFields out;
  const char* dict_key = f.has("rope_scaling") ? "rope_scaling" : "rope_parameters";
  const Json empty = Json::object();
  const Json* dict = &empty;
  if (f.has(dict_key)) {
    dict = &f.raw(dict_key);
    if (!dict->is_object()) fail(f.where(), dict_key, "expected an object, found {}", json_excerpt(*dict));
  }
  for (const auto& [k, v] : dict->items()) {
    if (v.is_object()) {
      fail(f.where(), std::string(dict_key) + "." + k,
           "expected one RoPE setting for every layer (per-layer-type RoPE is not supported)");
    }
  }
  const std::string field = dict_key;
  Fields r(*dict, f.where());
  auto name = [&](const char* k) { return field + "." + k; };
  out.theta = static_cast<float>(
      r.has("rope_theta") ? r.number("rope_theta") : f.number_or("rope_theta", default_theta));
  out.partial_rotary_factor =
      r.has("partial_rotary_factor") ? r.number("partial_rotary_factor")
                                     : f.number_or("partial_rotary_factor", default_partial);
  if (!(out.partial_rotary_factor > 0.0 && out.partial_rotary_factor <= 1.0)) {
    fail(f.where(), "partial_rotary_factor", "expected a value in (0, 1], found {}",
         out.partial_rotary_factor);
  }
  const std::string type = r.has("rope_type") ? r.string_or("rope_type", "default")
                                              : r.string_or("type", "default");
  if (type == "default") return out;
  if (type != "yarn") {
    fail(f.where(), name("rope_type"), "expected \"default\" or \"yarn\", found \"{}\"", type);
  }
  RopeScaling& y = out.scaling;
  y.kind = RopeScalingKind::kYarn;
  const double max_pos = f.number_or("max_position_embeddings", 4096);
  // transformers: a top-level original_max_position_embeddings wins (the Phi-3 exception), then
  // the dict's, then max_position_embeddings.
  double orig = max_pos;
  if (f.has("original_max_position_embeddings")) {
    orig = static_cast<double>(f.integer("original_max_position_embeddings", 1, int64_t{1} << 24));
  } else if (r.has("original_max_position_embeddings")) {
    orig = static_cast<double>(
        r.integer_value(r.raw("original_max_position_embeddings"),
                        "rope_parameters.original_max_position_embeddings", 1, int64_t{1} << 24));
  }
  y.original_max_positions = static_cast<int>(orig);
  y.factor = static_cast<float>(r.has("factor") ? r.number("factor") : max_pos / orig);
  // `get("beta_fast") or 32`: absent, null and 0 all mean the default.
  auto or_default = [&](const char* k, double d) {
    const double v = r.number_or(k, 0.0);
    return static_cast<float>(v != 0.0 ? v : d);
  };
  y.beta_fast = or_default("beta_fast", 32.0);
  y.beta_slow = or_default("beta_slow", 1.0);
  y.mscale = static_cast<float>(r.number_or("mscale", 0.0));
  y.mscale_all_dim = static_cast<float>(r.number_or("mscale_all_dim", 0.0));
  y.attention_factor = static_cast<float>(r.number_or("attention_factor", 0.0));
  y.truncate = r.boolean_or("truncate", true);
  return out;
}

// rope_theta, the rotated dims and the scaling of a GQA / MLA family (partial rotary only where
// the family reads partial_rotary_factor).
void apply_rope(const Fields& f, ModelConfig& c, double default_theta,
                double default_partial = 1.0, bool partial_allowed = false) {
  const RopeFields r = rope_of(f, default_theta, default_partial);
  c.rope_theta = r.theta;
  c.rope_scaling = r.scaling;
  if (partial_allowed) {
    c.rope_dim = static_cast<int>(c.head_dim * r.partial_rotary_factor);
  } else if (r.partial_rotary_factor != 1.0) {
    fail(f.where(), "partial_rotary_factor", "expected 1 for model type {} (found {})",
         family_name(c.family), r.partial_rotary_factor);
  }
}

void fill_common(const Fields& f, ModelConfig& c) {
  using L = ConfigLimits;
  c.vocab = static_cast<int>(f.integer("vocab_size", 1, L::kMaxVocab));
  c.hidden = static_cast<int>(f.integer("hidden_size", 1, L::kMaxHidden));
  c.layers = static_cast<int>(f.integer("num_hidden_layers", 1, L::kMaxLayers));
  c.heads = static_cast<int>(f.integer("num_attention_heads", 1, L::kMaxHeads));
  c.kv_heads = static_cast<int>(f.integer_or("num_key_value_heads", c.heads, 1, L::kMaxHeads));
  c.max_positions =
      static_cast<int>(f.integer_or("max_position_embeddings", 4096, 1, int64_t{1} << 24));
  c.rms_eps = static_cast<float>(f.number_or("rms_norm_eps", 1e-6));
  c.tied_embeddings = f.boolean_or("tie_word_embeddings", false);
  c.bos_token = f.token_or_none("bos_token_id", c.vocab);
  c.eos_token = f.token_or_none("eos_token_id", c.vocab);
  const std::string act = f.string_or("hidden_act", "silu");
  if (act != "silu") fail(f.where(), "hidden_act", "expected \"silu\", found \"{}\"", act);
  if (f.boolean_or("attention_bias", false)) {
    fail(f.where(), "attention_bias", "expected false (attention biases are not supported)");
  }
  // FP8 checkpoints (DeepSeek-V3 / Qwen3 convention): E4M3 weights with 128 x 128 block scales
  // in "<name>_scale_inv" tensors. Other quantization methods are rejected here.
  if (f.has("quantization_config") && !f.raw("quantization_config").is_null()) {
    const Json& q = f.raw("quantization_config");
    if (!q.is_object()) {
      fail(f.where(), "quantization_config", "expected an object, found {}", q.dump());
    }
    Fields qf(q, f.where());
    const std::string method = qf.string_or("quant_method", "");
    if (method != "fp8") {
      fail(f.where(), "quantization_config.quant_method", "expected \"fp8\", found \"{}\"", method);
    }
    const std::string fmt_name = qf.string_or("fmt", "e4m3");
    if (fmt_name != "e4m3") {
      fail(f.where(), "quantization_config.fmt", "expected \"e4m3\", found \"{}\"", fmt_name);
    }
    if (qf.has("weight_block_size")) {
      const Json& b = qf.raw("weight_block_size");
      if (b != Json::array({128, 128})) {
        fail(f.where(), "quantization_config.weight_block_size", "expected [128, 128], found {}",
             b.dump());
      }
    }
    c.fp8_block_scales = true;
  }
}

void fill_olmoe(const Fields& f, ModelConfig& c) {
  using L = ConfigLimits;
  c.family = Family::kOlmoe;
  fill_common(f, c);
  c.head_dim = static_cast<int>(
      f.integer_or("head_dim", c.heads > 0 ? c.hidden / c.heads : 0, 1, L::kMaxHeadDim));
  apply_rope(f, c, 10000.0);
  c.experts =
      static_cast<int>(integer_any(f, {"num_experts", "num_local_experts"}, 1, L::kMaxExperts));
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

void fill_qwen3_moe(const Fields& f, ModelConfig& c) {
  using L = ConfigLimits;
  c.family = Family::kQwen3Moe;
  fill_common(f, c);
  c.head_dim = static_cast<int>(
      f.integer_or("head_dim", c.heads > 0 ? c.hidden / c.heads : 0, 1, L::kMaxHeadDim));
  apply_rope(f, c, 10000.0);
  c.experts =
      static_cast<int>(integer_any(f, {"num_experts", "num_local_experts"}, 1, L::kMaxExperts));
  c.top_k = static_cast<int>(f.integer("num_experts_per_tok", 1, L::kMaxExperts));
  c.expert_ffn = static_cast<int>(f.integer("moe_intermediate_size", 1, L::kMaxFfn));
  c.dense_ffn = static_cast<int>(f.integer_or("intermediate_size", 0, 0, L::kMaxFfn));
  c.norm_topk_prob = f.boolean_or("norm_topk_prob", false);
  if (f.boolean_or("use_sliding_window", false)) {
    fail(f.where(), "use_sliding_window",
         "expected false (sliding-window attention is not supported)");
  }
  c.qk_norm = QkNorm::kPerHead;
  c.rope = RopeKind::kNeox;
  const int64_t step = f.integer_or("decoder_sparse_step", 1, 1, L::kMaxLayers);
  c.moe_layer.assign(static_cast<size_t>(c.layers), 0);
  for (int l = 0; l < c.layers; ++l) c.moe_layer[static_cast<size_t>(l)] = (l + 1) % step == 0;
  if (f.has("mlp_only_layers")) {
    const Json& only = f.raw("mlp_only_layers");
    if (!only.is_array()) fail(f.where(), "mlp_only_layers", "expected a list of layer indices");
    if (only.size() > static_cast<size_t>(c.layers)) {
      fail(f.where(), "mlp_only_layers", "expected at most {} entries, found {}", c.layers,
           only.size());
    }
    for (const Json& v : only) {
      const int64_t l = f.integer_value(v, "mlp_only_layers", 0, c.layers - 1);
      c.moe_layer[static_cast<size_t>(l)] = 0;
    }
  }
}

// Dense Qwen3 (model_type "qwen3", Qwen3ForCausalLM): a Qwen3-MoE whose every layer is an
// mlp_only layer, so it is the kQwen3Moe family with no MoE layer and no expert (the forward pass
// and the binder already run dense Qwen3-MoE layers). Defaults are Qwen3Config's.
void fill_qwen3(const Fields& f, ModelConfig& c) {
  using L = ConfigLimits;
  c.family = Family::kQwen3Moe;
  fill_common(f, c);
  c.head_dim = static_cast<int>(f.integer_or("head_dim", 128, 1, L::kMaxHeadDim));
  apply_rope(f, c, 10000.0);
  c.dense_ffn = static_cast<int>(f.integer_or("intermediate_size", 22016, 1, L::kMaxFfn));
  if (f.boolean_or("use_sliding_window", false)) {
    fail(f.where(), "use_sliding_window",
         "expected false (sliding-window attention is not supported)");
  }
  if (f.has("layer_types")) {
    const Json& types = f.raw("layer_types");
    if (!types.is_array() || types.size() != static_cast<size_t>(c.layers)) {
      fail(f.where(), "layer_types", "expected a list of {} entries (num_hidden_layers), found {}",
           c.layers, types.is_array() ? std::to_string(types.size()) : json_excerpt(types));
    }
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

void fill_deepseek_v3(const Fields& f, ModelConfig& c) {
  using L = ConfigLimits;
  c.family = Family::kDeepseekV3;
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
      integer_any(f, {"n_routed_experts", "num_local_experts"}, 1, L::kMaxExperts));
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

// Qwen3-Next (qwen3_next) and the Qwen3.5 / 3.6 MoE text model (qwen3_5_moe_text, also inside
// qwen3_5_moe's text_config). Defaults are the configuration classes'.
void fill_hybrid(const Fields& f, ModelConfig& c, Family family) {
  using L = ConfigLimits;
  c.family = family;
  fill_common(f, c);
  c.head_dim = static_cast<int>(f.integer_or("head_dim", 256, 1, L::kMaxHeadDim));
  apply_rope(f, c, 10000.0, 0.25, /*partial_allowed=*/true);
  c.experts =
      static_cast<int>(integer_any(f, {"num_experts", "num_local_experts"}, 1, L::kMaxExperts));
  c.top_k = static_cast<int>(f.integer("num_experts_per_tok", 1, L::kMaxExperts));
  c.expert_ffn = static_cast<int>(f.integer_or("moe_intermediate_size", 512, 1, L::kMaxFfn));
  c.shared_ffn =
      static_cast<int>(f.integer_or("shared_expert_intermediate_size", 512, 1, L::kMaxFfn));
  c.shared_expert_gate = true;
  c.attn_output_gate = true;
  c.qk_norm = QkNorm::kPerHead;
  c.rope = RopeKind::kNeox;
  c.norm_plus_one = true;
  c.moe_layer.assign(static_cast<size_t>(c.layers), 1);
  if (family == Family::kQwen3Next) {
    c.norm_topk_prob = f.boolean_or("norm_topk_prob", true);
    c.dense_ffn = static_cast<int>(f.integer_or("intermediate_size", 0, 0, L::kMaxFfn));
    const int64_t step = f.integer_or("decoder_sparse_step", 1, 1, L::kMaxLayers);
    for (int l = 0; l < c.layers; ++l) c.moe_layer[static_cast<size_t>(l)] = (l + 1) % step == 0;
    if (f.has("mlp_only_layers")) {
      const Json& only = f.raw("mlp_only_layers");
      if (!only.is_array() || only.size() > static_cast<size_t>(c.layers)) {
        fail(f.where(), "mlp_only_layers", "expected a list of at most {} layer indices", c.layers);
      }
      for (const Json& v : only) {
        c.moe_layer[static_cast<size_t>(f.integer_value(v, "mlp_only_layers", 0, c.layers - 1))] = 0;
      }
    }
  } else {
    c.norm_topk_prob = true;  // Qwen3_5MoeTopKRouter always renormalises
  }
  LinearAttnConfig& a = c.linear;
  a.conv_kernel =
      static_cast<int>(f.integer_or("linear_conv_kernel_dim", 4, 1, L::kMaxConvKernel));
  a.k_head_dim = static_cast<int>(f.integer_or("linear_key_head_dim", 128, 1, L::kMaxHeadDim));
  a.v_head_dim = static_cast<int>(f.integer_or("linear_value_head_dim", 128, 1, L::kMaxHeadDim));
  a.k_heads = static_cast<int>(f.integer_or("linear_num_key_heads", 16, 1, L::kMaxHeads));
  a.v_heads = static_cast<int>(f.integer_or("linear_num_value_heads", 32, 1, L::kMaxHeads));
  c.linear_layer.assign(static_cast<size_t>(c.layers), 0);
  if (f.has("layer_types")) {
    const Json& types = f.raw("layer_types");
    if (!types.is_array() || types.size() != static_cast<size_t>(c.layers)) {
      fail(f.where(), "layer_types", "expected a list of {} entries (num_hidden_layers), found {}",
           c.layers, types.is_array() ? std::to_string(types.size()) : json_excerpt(types));
    }
    for (size_t l = 0; l < types.size(); ++l) {
      const Json& t = types[l];
      const std::string v = t.is_string() ? t.get<std::string>() : json_excerpt(t);
      if (v == "linear_attention") {
        c.linear_layer[l] = 1;
      } else if (v != "full_attention") {
        fail(f.where(), fmt::format("layer_types[{}]", l),
             "expected \"linear_attention\" or \"full_attention\", found {}", json_excerpt(t));
      }
    }
  } else {
    const int64_t interval = f.integer_or("full_attention_interval", 4, 1, L::kMaxLayers);
    for (int l = 0; l < c.layers; ++l) c.linear_layer[static_cast<size_t>(l)] = (l + 1) % interval != 0;
  }
}

}  // namespace

ModelConfig parse_hf_config(std::string_view json_text, const std::string& where) {
  check_json_depth(json_text, where);  // before anything can recurse over a hostile nesting
  Json j = Json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) fail(where, "json", "expected a valid JSON document");
  if (!j.is_object()) fail(where, "json", "expected a JSON object at the top level");
  Fields f(j, where);
  const std::string type = f.string_or("model_type", "");
  ModelConfig c;
  c.source = where;
  if (type == "olmoe") {
    fill_olmoe(f, c);
  } else if (type == "qwen3_moe") {
    fill_qwen3_moe(f, c);
  } else if (type == "qwen3") {
    fill_qwen3(f, c);
  } else if (type == "deepseek_v3") {
    fill_deepseek_v3(f, c);
  } else if (type == "qwen3_next") {
    fill_hybrid(f, c, Family::kQwen3Next);
  } else if (type == "qwen3_5_moe_text") {
    fill_hybrid(f, c, Family::kQwen35Moe);
  } else if (type == "qwen3_5_moe") {
    // The multimodal wrapper: only the text model runs (the vision tower and the MTP head are
    // ignored). tie_word_embeddings lives at the top level.
    if (!f.has("text_config") || !f.raw("text_config").is_object()) {
      fail(where, "text_config", "expected an object (the qwen3_5_moe text model)");
    }
    Json text = f.raw("text_config");
    if (!text.contains("tie_word_embeddings") && j.contains("tie_word_embeddings")) {
      text["tie_word_embeddings"] = j["tie_word_embeddings"];
    }
    const std::string text_where = where + " (text_config)";
    Fields tf(text, text_where);
    // Through Fields: a model_type that is not a string is a clean error, not a JSON exception.
    const std::string inner = tf.string_or("model_type", "qwen3_5_moe_text");
    if (inner != "qwen3_5_moe_text") {
      fail(where, "text_config.model_type", "expected \"qwen3_5_moe_text\", found \"{}\"", inner);
    }
    fill_hybrid(tf, c, Family::kQwen35Moe);
  } else {
    fail(where, "model_type",
         "expected \"olmoe\", \"qwen3_moe\", \"qwen3\", \"deepseek_v3\", \"qwen3_next\", "
         "\"qwen3_5_moe\" or \"qwen3_5_moe_text\", found \"{}\"",
         type);
  }
  c.validate();
  return c;
}

ModelConfig load_hf_config(const std::filesystem::path& path) {
  const std::string s = read_input_file(path, "a config.json", uint64_t{1} << 24);
  return parse_hf_config(s, path.string());
}

std::string hf_config_json(const ModelConfig& c, std::string_view torch_dtype) {
  Json j;
  j["vocab_size"] = c.vocab;
  j["hidden_size"] = c.hidden;
  j["num_hidden_layers"] = c.layers;
  j["num_attention_heads"] = c.heads;
  j["max_position_embeddings"] = c.max_positions;
  j["rms_norm_eps"] = c.rms_eps;
  j["rope_theta"] = c.rope_theta;
  j["rope_scaling"] = nullptr;
  if (c.rope_scaling.kind == RopeScalingKind::kYarn) {
    const RopeScaling& y = c.rope_scaling;
    Json r{{"rope_type", "yarn"},
           {"factor", y.factor},
           {"original_max_position_embeddings", y.original_max_positions},
           {"beta_fast", y.beta_fast},
           {"beta_slow", y.beta_slow},
           {"truncate", y.truncate}};
    if (y.mscale != 0.0f) r["mscale"] = y.mscale;
    if (y.mscale_all_dim != 0.0f) r["mscale_all_dim"] = y.mscale_all_dim;
    if (y.attention_factor != 0.0f) r["attention_factor"] = y.attention_factor;
    j["rope_scaling"] = r;
  }
  j["hidden_act"] = "silu";
  j["attention_bias"] = false;
  j["tie_word_embeddings"] = c.tied_embeddings;
  j["torch_dtype"] = std::string(torch_dtype);
  if (c.has_moe()) {
    j["norm_topk_prob"] = c.norm_topk_prob;
    j["num_experts_per_tok"] = c.top_k;
  }
  if (c.bos_token >= 0) j["bos_token_id"] = c.bos_token;
  if (c.eos_token >= 0) j["eos_token_id"] = c.eos_token;
  switch (c.family) {
    case Family::kOlmoe:
      j["model_type"] = "olmoe";
      j["architectures"] = {"OlmoeForCausalLM"};
      j["num_key_value_heads"] = c.kv_heads;
      j["head_dim"] = c.head_dim;
      j["num_experts"] = c.experts;
      j["intermediate_size"] = c.expert_ffn;
      j["clip_qkv"] = c.clip_qkv > 0.0f ? Json(c.clip_qkv) : Json(nullptr);
      break;
    case Family::kQwen3Next:
    case Family::kQwen35Moe: {
      const bool next = c.family == Family::kQwen3Next;
      j["model_type"] = next ? "qwen3_next" : "qwen3_5_moe_text";
      j["architectures"] = {next ? "Qwen3NextForCausalLM" : "Qwen3_5MoeForCausalLM"};
      j["num_key_value_heads"] = c.kv_heads;
      j["head_dim"] = c.head_dim;
      j["partial_rotary_factor"] =
          static_cast<double>(c.rotary_dim()) / static_cast<double>(c.head_dim);
      j["num_experts"] = c.experts;
      j["moe_intermediate_size"] = c.expert_ffn;
      j["shared_expert_intermediate_size"] = c.shared_ffn;
      j["linear_conv_kernel_dim"] = c.linear.conv_kernel;
      j["linear_key_head_dim"] = c.linear.k_head_dim;
      j["linear_value_head_dim"] = c.linear.v_head_dim;
      j["linear_num_key_heads"] = c.linear.k_heads;
      j["linear_num_value_heads"] = c.linear.v_heads;
      Json types = Json::array();
      for (int l = 0; l < c.layers; ++l) {
        types.push_back(c.is_linear(l) ? "linear_attention" : "full_attention");
      }
      j["layer_types"] = types;
      if (next) {
        j["intermediate_size"] = c.dense_ffn > 0 ? c.dense_ffn : c.expert_ffn;
        j["decoder_sparse_step"] = 1;
        Json only = Json::array();
        for (int l = 0; l < c.layers; ++l) {
          if (!c.moe_layer[static_cast<size_t>(l)]) only.push_back(l);
        }
        j["mlp_only_layers"] = only;
      }
      break;
    }
    case Family::kQwen3Moe: {
      if (!c.has_moe()) {  // the dense Qwen3 (Qwen3Config's fields)
        j["model_type"] = "qwen3";
        j["architectures"] = {"Qwen3ForCausalLM"};
        j["num_key_value_heads"] = c.kv_heads;
        j["head_dim"] = c.head_dim;
        j["intermediate_size"] = c.dense_ffn;
        j["use_sliding_window"] = false;
        break;
      }
      j["model_type"] = "qwen3_moe";
      j["architectures"] = {"Qwen3MoeForCausalLM"};
      j["num_key_value_heads"] = c.kv_heads;
      j["head_dim"] = c.head_dim;
      j["num_experts"] = c.experts;
      j["moe_intermediate_size"] = c.expert_ffn;
      j["intermediate_size"] = c.dense_ffn > 0 ? c.dense_ffn : c.expert_ffn;
      j["decoder_sparse_step"] = 1;
      Json only = Json::array();
      for (int l = 0; l < c.layers; ++l) {
        if (!c.moe_layer[static_cast<size_t>(l)]) only.push_back(l);
      }
      j["mlp_only_layers"] = only;
      break;
    }
    case Family::kDeepseekV3: {
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
      while (first_dense < c.layers && !c.moe_layer[static_cast<size_t>(first_dense)])
        ++first_dense;
      j["first_k_dense_replace"] = first_dense;
      j["moe_layer_freq"] = 1;
      break;
    }
  }
  return j.dump(2) + "\n";
}

}  // namespace steermoe::model
