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
#include "model/family_def.hpp"

namespace steermoe::model {

using Json = nlohmann::json;

int64_t HfFields::integer(const char* key, int64_t lo, int64_t hi) const {
  if (!has(key)) fail(where_, key, "missing (expected an integer in [{}, {}])", lo, hi);
  return integer_value(j_.at(key), key, lo, hi);
}

int64_t HfFields::integer_any(std::initializer_list<const char*> keys, int64_t lo,
                              int64_t hi) const {
  for (const char* k : keys) {
    if (has(k)) return integer(k, lo, hi);
  }
  std::string names;
  for (const char* k : keys) names += names.empty() ? k : std::string(" or ") + k;
  fail(where_, names, "missing (expected an integer in [{}, {}])", lo, hi);
}

double HfFields::number(const char* key) const {
  if (!has(key)) fail(where_, key, "missing (expected a number)");
  return number_value(j_.at(key), key);
}

bool HfFields::boolean_or(const char* key, bool fallback) const {
  if (!has(key)) return fallback;
  const Json& v = j_.at(key);
  if (!v.is_boolean()) fail(where_, key, "expected true or false, found {}", json_excerpt(v));
  return v.get<bool>();
}

std::string HfFields::string_or(const char* key, const std::string& fallback) const {
  if (!has(key)) return fallback;
  const Json& v = j_.at(key);
  if (!v.is_string()) fail(where_, key, "expected a string, found {}", json_excerpt(v));
  return v.get<std::string>();
}

int HfFields::token_or_none(const char* key, int64_t vocab) const {
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

int64_t HfFields::integer_value(const Json& v, const char* key, int64_t lo, int64_t hi) const {
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

double HfFields::number_value(const Json& v, const char* key) const {
  if (!v.is_number()) fail(where_, key, "expected a number, found {}", json_excerpt(v));
  const double d = v.get<double>();
  if (!std::isfinite(d)) fail(where_, key, "expected a finite number, found {}", json_excerpt(v));
  return d;
}

namespace {

struct RopeFields {
  float theta = 10000.0f;
  double partial_rotary_factor = 1.0;
  RopeScaling scaling;
};

// RoPE settings as transformers resolves them (PreTrainedConfig.convert_rope_params_to_dict and
// standardize_rope_params): `rope_scaling` (v4) or `rope_parameters` (v5) holds the type and the
// scaling fields; rope_theta and partial_rotary_factor may sit inside it or at the top level.
// Types: "default" and "yarn" (anything else is refused with the accepted set).
RopeFields rope_of(const HfFields& f, double default_theta, double default_partial) {
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
  HfFields r(*dict, f.where());
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
}  // namespace

void apply_rope(const HfFields& f, ModelConfig& c, double default_theta, double default_partial,
                bool partial_allowed) {
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

void fill_common(const HfFields& f, ModelConfig& c) {
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
      fail(f.where(), "quantization_config", "expected an object, found {}", dump_json(q));
    }
    HfFields qf(q, f.where());
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
             dump_json(b));
      }
    }
    c.fp8_block_scales = true;
  }
}

void sparse_moe_layers(const HfFields& f, ModelConfig& c) {
  const int64_t step = f.integer_or("decoder_sparse_step", 1, 1, ConfigLimits::kMaxLayers);
  c.moe_layer.assign(static_cast<size_t>(c.layers), 0);
  for (int l = 0; l < c.layers; ++l) c.moe_layer[static_cast<size_t>(l)] = (l + 1) % step == 0;
  if (!f.has("mlp_only_layers")) return;
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

const Json* layer_types(const HfFields& f, int layers) {
  if (!f.has("layer_types")) return nullptr;
  const Json& types = f.raw("layer_types");
  if (!types.is_array() || types.size() != static_cast<size_t>(layers)) {
    fail(f.where(), "layer_types", "expected a list of {} entries (num_hidden_layers), found {}",
         layers, types.is_array() ? std::to_string(types.size()) : json_excerpt(types));
  }
  return &types;
}

void sparse_moe_layers_to_hf(const ModelConfig& c, Json& j) {
  j["decoder_sparse_step"] = 1;
  Json only = Json::array();
  for (int l = 0; l < c.layers; ++l) {
    if (!c.moe_layer[static_cast<size_t>(l)]) only.push_back(l);
  }
  j["mlp_only_layers"] = only;
}

ModelConfig parse_hf_config(std::string_view json_text, const std::string& where) {
  check_json_depth(json_text, where);  // before anything can recurse over a hostile nesting
  Json j = parse_json_or_discarded(json_text);
  if (j.is_discarded()) fail(where, "json", "expected a valid JSON document");
  if (!j.is_object()) fail(where, "json", "expected a JSON object at the top level");
  HfFields f(j, where);
  const std::string type = f.string_or("model_type", "");
  ModelConfig c;
  c.source = where;
  std::vector<std::string> known;
  for (const FamilyDef* def : family_defs()) {
    for (const std::string_view t : def->hf_types) {
      if (t == type) {
        c.family = def->id;
        def->from_hf(f, c, type);
        c.validate();
        return c;
      }
      known.push_back(fmt::format("\"{}\"", t));
    }
  }
  fail(where, "model_type", "expected {}, found \"{}\"", join_or(known), type);
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
  family_def(c.family).to_hf(c, j);
  return dump_json(j, 2) + "\n";
}

}  // namespace steermoe::model
