// Internal to model/: what a model family is made of, and the helpers its file builds on.
//
// A family is one file under families/ that defines a FamilyDef: its names in both file
// formats, how its config.json and GGUF hyperparameters become a ModelConfig and back, the
// tensors of its layers' mixer (names, shapes, binding, writing) and its named shapes. The
// generic code (config.cpp, hf_config.cpp, weights.cpp, weights_layout.cpp, weights_sources.cpp)
// does the rest, the same for every family: common hyperparameters, embedding, norms, head,
// dense and MoE feed-forward tensors, the writers. family.cpp lists the families.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/error.hpp"
#include "common/json_input.hpp"
#include "model/config.hpp"
#include "model/family.hpp"
#include "model/gguf.hpp"
#include "model/weights.hpp"
#include "model/weights_layout.hpp"

namespace steermoe::model {

class WeightBinder;
class HfFields;
class GgufKv;
class LayoutBuilder;

// What a family is called and is made of.
struct FamilyInfo {
  Family id = Family::kOlmoe;
  std::string_view name;        // family_name(): "olmoe"
  std::string_view dense_name;  // family_name() of a config with no MoE layer ("qwen3"); empty:
                                // such a config is invalid
  std::span<const std::string_view> hf_types;    // config.json model_type values
  std::span<const std::string_view> gguf_archs;  // general.architecture values; [0] is written
  std::string_view dense_gguf_arch;  // the architecture written for a config with no MoE layer
  Mixer attention = Mixer::kGqa;     // mixer of the layers that are not Gated DeltaNet layers
  bool hybrid = false;               // has Gated DeltaNet layers (layer_types)
  const char* hf_shared_expert = "mlp.shared_experts";  // HF name of the shared expert block
  // GGUF name of a layer's norm before its feed-forward block (HF post_attention_layernorm):
  // llama.cpp's converter calls it ffn_norm, but post_attention_norm for Qwen3-Next / Qwen3.5.
  const char* gguf_ffn_norm = "ffn_norm";
  // Pre-gate candidates PSR examines per layer by default (the policy's W): the paper's 8, and 4
  // for DeepSeek-style routers, whose top-6 of 64 leaves less room to predict.
  int pregate_window = 8;
  // Named shapes: real models, then "small" ones for tests (shape() makes them).
  std::span<const std::string_view> shapes;
  std::span<const std::string_view> small_shapes;
};

// A family: its FamilyInfo and the hooks the generic code calls. One class a file (families/).
class FamilyDef : public FamilyInfo {
 public:
  explicit FamilyDef(const FamilyInfo& info) : FamilyInfo(info) {}
  virtual ~FamilyDef() = default;
  FamilyDef(const FamilyDef&) = delete;
  FamilyDef& operator=(const FamilyDef&) = delete;

  // config.json -> the family's fields (model_type is one of hf_types; fill_common is the
  // family's to call, where its defaults need it).
  virtual void from_hf(const HfFields& f, ModelConfig& c, std::string_view model_type) const = 0;
  // GGUF metadata -> the family's fields, after the common keys (config_from_gguf). `dense`:
  // the file is dense_gguf_arch.
  virtual void from_gguf(const GgufFile& f, ModelConfig& c, bool dense) const = 0;
  // The family's config.json fields and GGUF metadata: the inverses of the two above.
  virtual void to_hf(const ModelConfig& c, nlohmann::json& j) const = 0;
  virtual void to_gguf(const ModelConfig& c, GgufKv& kv) const = 0;
  // The mixer tensors of layer l: names and shapes, and their binding (default: grouped-query
  // attention, gqa.cpp).
  virtual void layout_mixer(LayoutBuilder& b, const ModelConfig& c, int layer) const;
  virtual void bind_mixer(WeightBinder& b, const ModelConfig& c, int layer, LayerWeights& w) const;
  // Writer hooks for the slots whose stored form differs from the bound weights (a rearranged
  // or rebuilt tensor); false / nullopt (the default): not one of them.
  virtual bool produce(const Model& m, const TensorSlot& s, DType dtype, OutputFile& out) const;
  virtual std::optional<DType> stored_dtype(const Model& m, const TensorSlot& s) const;
  // The config of a named shape: false if it is not one of this family's (aliases allowed). `c`
  // comes with its source, NeoX RoPE and 4096 positions set; shape_config makes every layer a
  // MoE layer unless moe_layer is set, and validates it.
  virtual bool shape(std::string_view name, ModelConfig& c) const;
};

// The one instance of a family class (the accessors below).
template <typename F>
const FamilyDef& family_instance() {
  static const F family;
  return family;
}

// Every family, in Family order (family.cpp lists them).
std::span<const FamilyDef* const> family_defs();
const FamilyDef& family_def(Family family);
// "a, b or c" (the accepted values in messages).
std::string join_or(const std::vector<std::string>& items);

// ---- config.json (hf_config.cpp) ----

// Typed access to one config.json object with messages "<file>: <field>: expected ...".
class HfFields {
 public:
  using Json = nlohmann::json;
  HfFields(const Json& j, const std::string& where) : j_(j), where_(where) {}

  bool has(const char* key) const { return j_.contains(key) && !j_.at(key).is_null(); }
  int64_t integer(const char* key, int64_t lo, int64_t hi) const;
  int64_t integer_or(const char* key, int64_t fallback, int64_t lo, int64_t hi) const {
    return has(key) ? integer(key, lo, hi) : fallback;
  }
  // The first present key of several spellings (transformers' attribute_map); the message
  // names every accepted spelling.
  int64_t integer_any(std::initializer_list<const char*> keys, int64_t lo, int64_t hi) const;
  double number(const char* key) const;
  double number_or(const char* key, double fallback) const {
    return has(key) ? number(key) : fallback;
  }
  bool boolean_or(const char* key, bool fallback) const;
  std::string string_or(const char* key, const std::string& fallback) const;
  // A token id or a list of token ids (first one used); -1 when absent.
  int token_or_none(const char* key, int64_t vocab) const;
  const Json& raw(const char* key) const { return j_.at(key); }
  const Json& json() const { return j_; }
  const std::string& where() const { return where_; }
  int64_t integer_value(const Json& v, const char* key, int64_t lo, int64_t hi) const;
  double number_value(const Json& v, const char* key) const;

 private:
  const Json& j_;
  const std::string& where_;
};

// The fields every family reads (sizes, eps, tied embeddings, tokens, hidden_act, attention
// bias refused, FP8 quantization_config).
void fill_common(const HfFields& f, ModelConfig& c);
// rope_theta, the rotated dims and the scaling (partial rotary only where the family reads
// partial_rotary_factor).
void apply_rope(const HfFields& f, ModelConfig& c, double default_theta,
                double default_partial = 1.0, bool partial_allowed = false);
// MoE layers from decoder_sparse_step and mlp_only_layers (Qwen families), and back (step 1,
// the dense layers listed).
void sparse_moe_layers(const HfFields& f, ModelConfig& c);
void sparse_moe_layers_to_hf(const ModelConfig& c, nlohmann::json& j);
// config.json layer_types: null when absent, else a list of one entry per layer (checked).
const nlohmann::json* layer_types(const HfFields& f, int layers);

// ---- GGUF metadata (config.cpp, weights_layout.cpp) ----

int gguf_int(const GgufFile& f, const std::string& key);
int gguf_int_or(const GgufFile& f, const std::string& key, int fallback);

// The "<arch>." keys of a GGUF being written.
class GgufKv {
 public:
  GgufKv(std::string arch, std::vector<std::pair<std::string, GgufValue>>& kv)
      : arch_(std::move(arch)), kv_(kv) {}
  const std::string& arch() const { return arch_; }
  void u32(const std::string& key, int v) {
    kv_.emplace_back(arch_ + "." + key, GgufValue::u32(static_cast<uint32_t>(v)));
  }
  void f32(const std::string& key, float v) {
    kv_.emplace_back(arch_ + "." + key, GgufValue::f32(v));
  }
  void boolean(const std::string& key, bool v) {
    kv_.emplace_back(arch_ + "." + key, GgufValue::boolean(v));
  }
  void add(const std::string& key, GgufValue v) {
    kv_.emplace_back(arch_ + "." + key, std::move(v));
  }

 private:
  std::string arch_;
  std::vector<std::pair<std::string, GgufValue>>& kv_;
};

// ---- tensors (weights_layout.cpp, weights_sources.cpp) ----

// Collects the slots of one format: each tensor is named for both formats, the builder keeps one.
class LayoutBuilder {
 public:
  explicit LayoutBuilder(WeightFormat f) : gguf_(f == WeightFormat::kGguf) {}
  void add(std::string gguf_name, std::string hf_name, std::vector<uint64_t> shape, Role role,
           int layer = -1, int expert = -1);
  // "blk.L.<g>.weight" / "model.layers.L.<h>.weight".
  void layer(int l, const char* g, const char* h, std::vector<uint64_t> shape, Role role);
  bool gguf() const { return gguf_; }
  // The slot added last is stored as F32 by every writer (TensorSlot::f32_only).
  void require_f32_last() { slots_.back().f32_only = true; }
  std::vector<TensorSlot> take() { return std::move(slots_); }

 private:
  bool gguf_;
  std::vector<TensorSlot> slots_;
};

// Grouped-query attention (gqa.cpp): q/k/v/o, q/k norms (whole projection or per head), and the
// gated form (q_proj rows [query | gate] per head). Shared by every GQA family.
void layout_gqa_attention(LayoutBuilder& b, const ModelConfig& c, int layer);
void bind_gqa_attention(WeightBinder& b, const ModelConfig& c, int layer, LayerWeights& w);

// Writer helpers for the families' produce hooks (weights_sources.cpp).
bool slot_is_gguf(const TensorSlot& s);  // blk.*, token_embd, output* (HF: model.*, lm_head)
// Rows `rows` of `mat` in that order, each row's columns in the order `columns` (empty: as
// stored), written as `dtype`: the stored bytes where that changes nothing (same dtype, rows or
// whole blocks moved), else each row dequantized, rearranged and encoded (a quantized or FP8
// source, another dtype asked for, columns that split a block).
void write_rows(const kernels::Matrix& mat, std::span<const uint64_t> rows, DType dtype,
                const std::string& name, OutputFile& out, std::span<const uint64_t> columns = {});
void write_f32_as(const std::vector<float>& v, DType dtype, const std::string& name,
                  OutputFile& out);

}  // namespace steermoe::model
