// Qwen3-Next and Qwen3.5 / 3.6 MoE: the same hybrid architecture, two families (two file
// layouts). Groups of Gated DeltaNet (linear attention) layers and gated full-attention layers
// (q_proj [query | gate] per head, per-head q/k RMSNorm, partial RoPE); a softmax router
// (renormalised); a shared expert scaled by sigmoid(shared_expert_gate . x); (1 + w) RMSNorm
// weights. HF model_type "qwen3_next" / "qwen3_5_moe" (with text_config) and "qwen3_5_moe_text";
// GGUF architecture "qwen3next" / "qwen35moe".
//
// The Gated DeltaNet weights of both formats are bound into one layout (LinearAttnWeights):
//   HF Qwen3-Next   in_proj_qkvz / in_proj_ba fused, interleaved per key head -> rows gathered
//   HF Qwen3.5      in_proj_qkv, in_proj_z, in_proj_b, in_proj_a            -> used in place
//   GGUF qwen3next  attn_qkv, attn_gate (de-interleaved by llama.cpp; older files: ssm_in, the
//                   interleaved in_proj_qkvz), ssm_ba (fused)
//   GGUF qwen35moe  attn_qkv, attn_gate, ssm_beta, ssm_alpha; value heads in tiled order
// A_log is kept as -exp(A_log) (what GGUF's ssm_a stores). The writer undoes all of it.
#include <fmt/format.h>

#include <cmath>
#include <cstring>

#include "model/family_def.hpp"
#include "model/weights_binder.hpp"

namespace steermoe::model {
namespace {

using Json = nlohmann::json;

// ---- hyperparameters ----

void linear_attention_from_hf(const HfFields& f, ModelConfig& c) {
  using L = ConfigLimits;
  LinearAttnConfig& a = c.linear;
  a.conv_kernel = static_cast<int>(f.integer_or("linear_conv_kernel_dim", 4, 1, L::kMaxConvKernel));
  a.k_head_dim = static_cast<int>(f.integer_or("linear_key_head_dim", 128, 1, L::kMaxHeadDim));
  a.v_head_dim = static_cast<int>(f.integer_or("linear_value_head_dim", 128, 1, L::kMaxHeadDim));
  a.k_heads = static_cast<int>(f.integer_or("linear_num_key_heads", 16, 1, L::kMaxHeads));
  a.v_heads = static_cast<int>(f.integer_or("linear_num_value_heads", 32, 1, L::kMaxHeads));
  c.linear_layer.assign(static_cast<size_t>(c.layers), 0);
  if (const Json* list = layer_types(f, c.layers)) {
    const Json& types = *list;
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
    for (int l = 0; l < c.layers; ++l)
      c.linear_layer[static_cast<size_t>(l)] = (l + 1) % interval != 0;
  }
}

void text_from_hf(const HfFields& f, ModelConfig& c) {
  using L = ConfigLimits;
  fill_common(f, c);
  c.head_dim = static_cast<int>(f.integer_or("head_dim", 256, 1, L::kMaxHeadDim));
  apply_rope(f, c, 10000.0, 0.25, /*partial_allowed=*/true);
  c.experts =
      static_cast<int>(f.integer_any({"num_experts", "num_local_experts"}, 1, L::kMaxExperts));
  c.top_k = static_cast<int>(f.integer("num_experts_per_tok", 1, L::kMaxExperts));
  c.expert_ffn = static_cast<int>(f.integer_or("moe_intermediate_size", 512, 1, L::kMaxFfn));
  c.shared_ffn =
      static_cast<int>(f.integer_or("shared_expert_intermediate_size", 512, 1, L::kMaxFfn));
  c.shared_expert_gate = true;
  c.attn_output_gate = true;
  c.qk_norm = QkNorm::kPerHead;
  c.rope = RopeKind::kNeox;
  c.norm_plus_one = true;
  if (c.family == Family::kQwen3Next) {
    c.norm_topk_prob = f.boolean_or("norm_topk_prob", true);
    c.dense_ffn = static_cast<int>(f.integer_or("intermediate_size", 0, 0, L::kMaxFfn));
    sparse_moe_layers(f, c);
  } else {
    c.norm_topk_prob = true;  // Qwen3_5MoeTopKRouter always renormalises
    c.moe_layer.assign(static_cast<size_t>(c.layers), 1);
  }
  linear_attention_from_hf(f, c);
}

// ---- tensors ----

// Gated DeltaNet tensors. HF: Qwen3-Next stores in_proj_qkvz / in_proj_ba fused and
// interleaved per key head, Qwen3.5 in_proj_qkv / z / b / a split; A_log and dt_bias have no
// ".weight". GGUF (llama.cpp): attn_qkv, attn_gate, ssm_beta + ssm_alpha (qwen35moe) or
// ssm_ba (qwen3next), ssm_conv1d [conv_dim, K] (F32: llama.cpp's ssm_conv reads nothing else),
// ssm_dt.bias, ssm_a, ssm_norm, ssm_out.
void layout_linear_attention(LayoutBuilder& b, const ModelConfig& c, int l) {
  using U = uint64_t;
  const LinearAttnConfig& a = c.linear;
  const U H = static_cast<U>(c.hidden);
  const U conv_dim = static_cast<U>(a.conv_dim()), vd = static_cast<U>(a.value_dim());
  const U nv = static_cast<U>(a.v_heads), K = static_cast<U>(a.conv_kernel);
  const bool next = c.family == Family::kQwen3Next;
  auto hf = [l](const char* name) {
    return fmt::format("model.layers.{}.linear_attn.{}", l, name);
  };
  auto gg = [l](const char* name) { return fmt::format("blk.{}.{}", l, name); };
  if (!b.gguf() && next) {
    b.add("", hf("in_proj_qkvz.weight"), {conv_dim + vd, H}, Role::kLinQkvz, l);
    b.add("", hf("in_proj_ba.weight"), {2 * nv, H}, Role::kLinBa, l);
  } else {
    b.add(gg("attn_qkv.weight"), hf("in_proj_qkv.weight"), {conv_dim, H}, Role::kLinQkv, l);
    b.add(gg("attn_gate.weight"), hf("in_proj_z.weight"), {vd, H}, Role::kLinZ, l);
    if (next) {
      b.add(gg("ssm_ba.weight"), "", {2 * nv, H}, Role::kLinBa, l);
    } else {
      b.add(gg("ssm_beta.weight"), hf("in_proj_b.weight"), {nv, H}, Role::kLinB, l);
      b.add(gg("ssm_alpha.weight"), hf("in_proj_a.weight"), {nv, H}, Role::kLinA, l);
    }
  }
  b.add(gg("ssm_conv1d.weight"), hf("conv1d.weight"),
        b.gguf() ? std::vector<U>{conv_dim, K} : std::vector<U>{conv_dim, 1, K}, Role::kLinConv, l);
  if (b.gguf()) b.require_f32_last();
  b.add(gg("ssm_dt.bias"), hf("dt_bias"), {nv}, Role::kLinDtBias, l);
  b.add(gg("ssm_a"), hf("A_log"), {nv}, Role::kLinALog, l);
  b.add(gg("ssm_norm.weight"), hf("norm.weight"), {static_cast<U>(a.v_head_dim)}, Role::kLinNorm,
        l);
  b.add(gg("ssm_out.weight"), hf("out_proj.weight"), {H, vd}, Role::kLinOut, l);
}

// Row order of Qwen3-Next's fused projections: rows of in_proj_qkvz [q | k | v | z per key
// head] that make q | k | v (first) and z (second), and rows of in_proj_ba [b | a per key head]
// that make b and a.
struct FusedRows {
  std::vector<uint64_t> qkv, z, b, a;
};

FusedRows qwen3next_fused_rows(const LinearAttnConfig& a) {
  const auto nk = static_cast<uint64_t>(a.k_heads);
  const auto hk = static_cast<uint64_t>(a.k_head_dim);
  const auto hv = static_cast<uint64_t>(a.v_head_dim);
  const uint64_t r = static_cast<uint64_t>(a.v_heads) / nk;  // value heads per key head
  const uint64_t group = 2 * hk + 2 * r * hv;                // rows of one key head in qkvz
  FusedRows f;
  for (uint64_t g = 0; g < nk; ++g)
    for (uint64_t d = 0; d < hk; ++d) f.qkv.push_back(g * group + d);
  for (uint64_t g = 0; g < nk; ++g)
    for (uint64_t d = 0; d < hk; ++d) f.qkv.push_back(g * group + hk + d);
  for (uint64_t g = 0; g < nk; ++g)
    for (uint64_t d = 0; d < r * hv; ++d) f.qkv.push_back(g * group + 2 * hk + d);
  for (uint64_t g = 0; g < nk; ++g)
    for (uint64_t d = 0; d < r * hv; ++d) f.z.push_back(g * group + 2 * hk + r * hv + d);
  for (uint64_t g = 0; g < nk; ++g) {
    for (uint64_t i = 0; i < r; ++i) f.b.push_back(g * 2 * r + i);
    for (uint64_t i = 0; i < r; ++i) f.a.push_back(g * 2 * r + r + i);
  }
  return f;
}

void bind_linear_attention(WeightBinder& b, const ModelConfig& c, int l, LinearAttnWeights& w) {
  const LinearAttnConfig& a = c.linear;
  const auto H = static_cast<uint64_t>(c.hidden);
  const auto conv_dim = static_cast<uint64_t>(a.conv_dim());
  const auto vd = static_cast<uint64_t>(a.value_dim());
  const auto nv = static_cast<uint64_t>(a.v_heads);
  const auto K = static_cast<uint64_t>(a.conv_kernel);
  const bool next = c.family == Family::kQwen3Next;
  const std::string p = b.gguf() ? fmt::format("blk.{}.", l) : b.hf_layer(l) + "linear_attn.";
  if (b.gguf() && next && !b.has(p + "attn_qkv.weight") && b.has(p + "ssm_in.weight")) {
    // Older llama.cpp qwen3next GGUFs keep HF's interleaved in_proj_qkvz as ssm_in.
    const FusedRows rows = qwen3next_fused_rows(a);
    const TensorView qkvz = b.require(p + "ssm_in.weight", {conv_dim + vd, H});
    w.qkv = b.gather_rows(qkvz, rows.qkv, H);
    w.z = b.gather_rows(qkvz, rows.z, H);
  } else if (b.gguf()) {
    w.qkv = b.matrix(p + "attn_qkv.weight", conv_dim, H);
    w.z = b.matrix(p + "attn_gate.weight", vd, H);
  } else if (next) {
    const FusedRows rows = qwen3next_fused_rows(a);
    const TensorView qkvz = b.require(p + "in_proj_qkvz.weight", {conv_dim + vd, H});
    w.qkv = b.gather_rows(qkvz, rows.qkv, H);
    w.z = b.gather_rows(qkvz, rows.z, H);
  } else {
    w.qkv = b.matrix(p + "in_proj_qkv.weight", conv_dim, H);
    w.z = b.matrix(p + "in_proj_z.weight", vd, H);
  }
  if (next) {
    const FusedRows rows = qwen3next_fused_rows(a);
    // GGUF: llama.cpp's ssm_ba; ssm_beta_alpha in files steermoe wrote before 2026-12-07.
    const std::string ba_name = !b.gguf()                            ? p + "in_proj_ba.weight"
                                : b.has(p + "ssm_beta_alpha.weight") ? p + "ssm_beta_alpha.weight"
                                                                     : p + "ssm_ba.weight";
    const TensorView ba = b.require(ba_name, {2 * nv, H});
    w.b = b.gather_rows(ba, rows.b, H);
    w.a = b.gather_rows(ba, rows.a, H);
  } else {
    w.b = b.matrix(p + (b.gguf() ? "ssm_beta.weight" : "in_proj_b.weight"), nv, H);
    w.a = b.matrix(p + (b.gguf() ? "ssm_alpha.weight" : "in_proj_a.weight"), nv, H);
  }
  w.conv = b.gguf() ? b.vector_of_shape(p + "ssm_conv1d.weight", {conv_dim, K})
                    : b.vector_of_shape(p + "conv1d.weight", {conv_dim, 1, K});
  w.dt_bias = b.vector(p + (b.gguf() ? "ssm_dt.bias" : "dt_bias"), nv);
  if (b.gguf()) {
    w.a_neg = b.vector(p + "ssm_a", nv);
  } else {
    w.a_neg = b.vector(p + "A_log", nv);
    // transformers: g = -A_log.float().exp() * softplus(...).
    for (float& x : w.a_neg) x = -std::exp(x);
    w.a_neg.source_dtype = DType::kF32;
  }
  for (size_t h = 0; h < w.a_neg.size(); ++h) {
    if (!(w.a_neg[h] <= 0.0f && std::isfinite(w.a_neg[h]))) {
      fail(b.where(), p + (b.gguf() ? "ssm_a" : "A_log"),
           "expected -exp(A_log) to be finite and <= 0 for every head, found {} at head {}",
           w.a_neg[h], h);
    }
  }
  w.norm = b.vector(p + (b.gguf() ? "ssm_norm.weight" : "norm.weight"),
                    static_cast<uint64_t>(a.v_head_dim));
  w.out = b.matrix(p + (b.gguf() ? "ssm_out.weight" : "out_proj.weight"), H, vd);
}

// ---- writer: value-head order, fused projections, stored-vs-effective vectors ----

// Value head of the model (in its in-memory order) that is value head t of the slot's file.
uint64_t source_v_head(const Model& m, const TensorSlot& s, uint64_t t) {
  const ModelConfig& c = m.config();
  const bool src_tiled = c.linear.v_heads_tiled;
  const bool dst_tiled = slot_is_gguf(s) && c.family == Family::kQwen35Moe;
  const auto nk = static_cast<uint64_t>(c.linear.k_heads);
  const uint64_t r = static_cast<uint64_t>(c.linear.v_heads) / nk;
  if (src_tiled == dst_tiled) return t;
  if (dst_tiled) return (t % nk) * r + t / nk;  // grouped source
  return (t % r) * nk + t / r;                  // tiled source
}

// Rows of a [v_heads * block, ...] matrix (or the v part of qkv, starting at `first`) in the
// slot's value-head order.
std::vector<uint64_t> v_rows(const Model& m, const TensorSlot& s, uint64_t first, uint64_t block) {
  const auto nv = static_cast<uint64_t>(m.config().linear.v_heads);
  std::vector<uint64_t> rows;
  rows.reserve(first + nv * block);
  for (uint64_t i = 0; i < first; ++i) rows.push_back(i);
  for (uint64_t t = 0; t < nv; ++t) {
    const uint64_t h = source_v_head(m, s, t);
    for (uint64_t d = 0; d < block; ++d) rows.push_back(first + h * block + d);
  }
  return rows;
}

constexpr std::string_view kNextHfTypes[] = {"qwen3_next"};
constexpr std::string_view kNextGgufArchs[] = {"qwen3next"};
constexpr std::string_view kQwen35HfTypes[] = {"qwen3_5_moe", "qwen3_5_moe_text"};
constexpr std::string_view kQwen35GgufArchs[] = {"qwen35moe"};
// Both families' shapes are listed (and made) by one of them.
constexpr std::string_view kShapes[] = {"Qwen3.6-35B-A3B", "Qwen3-Next-80B-A3B"};
constexpr std::string_view kSmallShapes[] = {"qwen35moe-small", "qwen3next-small"};

// Qwen3-Next's interleaved in_proj_qkvz (qkvz) or in_proj_ba from the bound matrices (value
// heads grouped on both sides).
void write_fused(const LinearAttnWeights& la, const LinearAttnConfig& a, bool qkvz, DType dtype,
                 const std::string& name, OutputFile& out) {
  SM_ASSERT(!a.v_heads_tiled);
  const FusedRows f = qwen3next_fused_rows(a);
  const std::vector<uint64_t>& first = qkvz ? f.qkv : f.b;
  const std::vector<uint64_t>& second = qkvz ? f.z : f.a;
  const kernels::Matrix& m1 = qkvz ? la.qkv : la.b;
  const kernels::Matrix& m2 = qkvz ? la.z : la.a;
  std::vector<std::pair<const kernels::Matrix*, uint64_t>> src(first.size() + second.size());
  for (size_t i = 0; i < first.size(); ++i) src[first[i]] = {&m1, i};
  for (size_t i = 0; i < second.size(); ++i) src[second[i]] = {&m2, i};
  for (const auto& [mat, row] : src) write_rows(*mat, {&row, 1}, dtype, name, out);
}

// The conv weights, channels in the slot's value-head order.
std::vector<float> conv_rows(const Model& m, const TensorSlot& s) {
  const LinearAttnConfig& a = m.config().linear;
  const WeightVector& conv = m.layer(s.layer).linear.conv;
  const auto K = static_cast<uint64_t>(a.conv_kernel);
  const std::vector<uint64_t> channels =
      v_rows(m, s, 2 * static_cast<uint64_t>(a.key_dim()), static_cast<uint64_t>(a.v_head_dim));
  std::vector<float> x;
  x.reserve(conv.size());
  for (uint64_t ch : channels)
    x.insert(x.end(), conv.begin() + static_cast<ptrdiff_t>(ch * K),
             conv.begin() + static_cast<ptrdiff_t>((ch + 1) * K));
  return x;
}

// dt_bias or A_log per value head, in the slot's order (HF A_log: log(-a_neg), not bit-exact
// through -exp).
std::vector<float> head_vector(const Model& m, const TensorSlot& s) {
  const LinearAttnWeights& la = m.layer(s.layer).linear;
  const WeightVector& v = s.role == Role::kLinDtBias ? la.dt_bias : la.a_neg;
  const auto nv = static_cast<uint64_t>(m.config().linear.v_heads);
  std::vector<float> x(nv);
  for (uint64_t t = 0; t < nv; ++t) x[t] = v[source_v_head(m, s, t)];
  if (s.role == Role::kLinALog && !slot_is_gguf(s)) {
    for (float& e : x) e = std::log(-e);
  }
  return x;
}

// out_proj, its columns in value-head blocks of the slot's order.
void write_out_columns(const Model& m, const TensorSlot& s, DType dtype, OutputFile& out) {
  const kernels::Matrix& o = m.layer(s.layer).linear.out;
  const auto hv = static_cast<uint64_t>(m.config().linear.v_head_dim);
  const auto nv = static_cast<uint64_t>(m.config().linear.v_heads);
  std::vector<uint64_t> columns(nv * hv), rows(o.rows);
  for (uint64_t t = 0; t < nv; ++t) {
    const uint64_t h = source_v_head(m, s, t);
    for (uint64_t j = 0; j < hv; ++j) columns[t * hv + j] = h * hv + j;
  }
  for (uint64_t r = 0; r < o.rows; ++r) rows[r] = r;
  write_rows(o, rows, dtype, s.name, out, columns);
}

class Hybrid final : public FamilyDef {
 public:
  explicit Hybrid(const FamilyInfo& info) : FamilyDef(info) {}

  // qwen3_5_moe is the multimodal wrapper: only the text model (text_config) runs (the vision tower
  // and the MTP head are ignored); tie_word_embeddings lives at the top level.
  void from_hf(const HfFields& f, ModelConfig& c, std::string_view model_type) const override {
    if (model_type != "qwen3_5_moe") {
      text_from_hf(f, c);
      return;
    }
    if (!f.has("text_config") || !f.raw("text_config").is_object()) {
      fail(f.where(), "text_config", "expected an object (the qwen3_5_moe text model)");
    }
    Json text = f.raw("text_config");
    if (!text.contains("tie_word_embeddings") && f.json().contains("tie_word_embeddings")) {
      text["tie_word_embeddings"] = f.json()["tie_word_embeddings"];
    }
    const std::string text_where = f.where() + " (text_config)";
    HfFields tf(text, text_where);
    // Through HfFields: a model_type that is not a string is a clean error, not a JSON exception.
    const std::string inner = tf.string_or("model_type", "qwen3_5_moe_text");
    if (inner != "qwen3_5_moe_text") {
      fail(f.where(), "text_config.model_type", "expected \"qwen3_5_moe_text\", found \"{}\"",
           inner);
    }
    text_from_hf(tf, c);
  }

  void from_gguf(const GgufFile& f, ModelConfig& c, bool /*dense*/) const override {
    const std::string& p = c.gguf_prefix;
    c.head_dim = gguf_int(f, p + "attention.key_length");
    if (gguf_int_or(f, p + "attention.value_length", c.head_dim) != c.head_dim) {
      fail(f.name(), p + "attention.value_length", "expected key_length ({})", c.head_dim);
    }
    c.rope_dim = gguf_int_or(f, p + "rope.dimension_count", c.head_dim);
    c.expert_ffn = gguf_int(f, p + "expert_feed_forward_length");
    c.shared_ffn = gguf_int_or(f, p + "expert_shared_feed_forward_length", 0);
    c.qk_norm = QkNorm::kPerHead;
    c.rope = RopeKind::kNeox;
    c.norm_topk_prob = f.find_bool(p + "expert_weights_norm").value_or(true);
    c.attn_output_gate = true;
    c.shared_expert_gate = c.shared_ffn > 0;
    c.norm_plus_one = true;
    LinearAttnConfig& a = c.linear;
    a.conv_kernel = gguf_int(f, p + "ssm.conv_kernel");
    a.k_head_dim = gguf_int(f, p + "ssm.state_size");
    a.k_heads = gguf_int(f, p + "ssm.group_count");
    a.v_heads = gguf_int(f, p + "ssm.time_step_rank");
    const int inner = gguf_int(f, p + "ssm.inner_size");
    if (a.v_heads <= 0 || inner % a.v_heads != 0) {
      fail(f.name(), p + "ssm.inner_size",
           "expected a multiple of ssm.time_step_rank ({}), found {}", a.v_heads, inner);
    }
    a.v_head_dim = inner / a.v_heads;
    a.v_heads_tiled = c.family == Family::kQwen35Moe;
    const int interval = gguf_int_or(f, p + "full_attention_interval", 4);
    if (interval < 1) {
      fail(f.name(), p + "full_attention_interval", "expected a positive integer, found {}",
           interval);
    }
    c.linear_layer.assign(static_cast<size_t>(std::max(c.layers, 0)), 0);
    const std::string recurrent = p + "attention.recurrent_layers";
    if (f.has(recurrent)) {
      // llama.cpp's converter writes the pattern from config.json's layer_types when it has one
      // (over block_count entries: the multi-token-prediction layers last, as false).
      const GgufArray& pattern = f.get_array(recurrent);
      if (pattern.element_type != GgufType::kBool ||
          pattern.items.size() < static_cast<size_t>(c.layers)) {
        fail(f.name(), recurrent, "expected an array of at least {} bools, found {} {}", c.layers,
             pattern.items.size(), gguf_type_name(pattern.element_type));
      }
      for (int l = 0; l < c.layers; ++l) {
        c.linear_layer[static_cast<size_t>(l)] =
            std::get<bool>(pattern.items[static_cast<size_t>(l)].value) ? 1 : 0;
      }
      return;
    }
    for (int l = 0; l < c.layers; ++l)
      c.linear_layer[static_cast<size_t>(l)] = (l + 1) % interval != 0;
  }

  void to_hf(const ModelConfig& c, Json& j) const override {
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
      sparse_moe_layers_to_hf(c, j);
    }
  }

  void to_gguf(const ModelConfig& c, GgufKv& kv) const override {
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
        fail(c.source, "mlp_only_layers", "GGUF {} has no dense layers (layer {} is dense)",
             kv.arch(), l);
      }
    }
    kv.u32("feed_forward_length", c.expert_ffn);
    kv.u32("expert_feed_forward_length", c.expert_ffn);
    kv.u32("expert_shared_feed_forward_length", c.shared_ffn);
    kv.u32("attention.head_count_kv", c.kv_heads);
    kv.u32("attention.key_length", c.head_dim);
    kv.u32("attention.value_length", c.head_dim);
    kv.u32("rope.dimension_count", c.rotary_dim());
    kv.boolean("expert_weights_norm", c.norm_topk_prob);
    kv.u32("ssm.conv_kernel", a.conv_kernel);
    kv.u32("ssm.state_size", a.k_head_dim);
    kv.u32("ssm.group_count", a.k_heads);
    kv.u32("ssm.time_step_rank", a.v_heads);
    kv.u32("ssm.inner_size", a.value_dim());
    kv.u32("full_attention_interval", interval);
    if (c.family == Family::kQwen35Moe) {
      // Interleaved mRoPE sections (llama.cpp requires the key): rotary pair k takes section
      // k % 3 while k < 3 x that section's size, so the sizes ceil(half / 3), (half + 1) / 3 and
      // half / 3 give every pair one of the three (HF's [11, 11, 10] at half 32). With text
      // positions the three are the same position and this is plain RoPE.
      const int half = c.rotary_dim() / 2;
      const std::vector<int32_t> sections = {(half + 2) / 3, (half + 1) / 3, half / 3, 0};
      kv.add("rope.dimension_sections", GgufValue::i32_array(sections));
    }
  }

  void layout_mixer(LayoutBuilder& b, const ModelConfig& c, int l) const override {
    if (c.is_linear(l)) {
      layout_linear_attention(b, c, l);
    } else {
      layout_gqa_attention(b, c, l);
    }
  }

  void bind_mixer(WeightBinder& b, const ModelConfig& c, int l, LayerWeights& w) const override {
    if (c.is_linear(l)) {
      bind_linear_attention(b, c, l, w.linear);
    } else {
      bind_gqa_attention(b, c, l, w);
    }
  }

  // Slots stored otherwise than bound (value-head order, fused projections, zero-centred norms);
  // false if `s` is not one of them.
  bool produce(const Model& m, const TensorSlot& s, DType dtype, OutputFile& out) const override {
    const ModelConfig& c = m.config();
    const bool gguf = slot_is_gguf(s);
    // Zero-centred norms in HF files: the loader folded the 1 in.
    const bool plus_one = c.norm_plus_one && !gguf;
    auto norm_out = [&](const WeightVector& v) {
      std::vector<float> x(v.begin(), v.end());
      if (plus_one) {
        for (float& e : x) e -= 1.0f;
      }
      write_f32_as(x, dtype, s.name, out);
    };
    if (s.role == Role::kFinalNorm) {
      norm_out(m.final_norm());
      return true;
    }
    if (s.layer < 0) return false;
    const LayerWeights& w = m.layer(s.layer);
    const LinearAttnWeights& la = w.linear;
    const LinearAttnConfig& a = c.linear;
    const auto hv = static_cast<uint64_t>(a.v_head_dim);
    const auto kd = static_cast<uint64_t>(a.key_dim());
    switch (s.role) {
      case Role::kAttnNorm:
        norm_out(w.attn_norm);
        return true;
      case Role::kFfnNorm:
        norm_out(w.ffn_norm);
        return true;
      case Role::kQNorm:
        norm_out(w.q_norm);
        return true;
      case Role::kKNorm:
        norm_out(w.k_norm);
        return true;
      case Role::kLinQkv:
        write_rows(la.qkv, v_rows(m, s, 2 * kd, hv), dtype, s.name, out);
        return true;
      case Role::kLinZ:
        write_rows(la.z, v_rows(m, s, 0, hv), dtype, s.name, out);
        return true;
      case Role::kLinB:
        write_rows(la.b, v_rows(m, s, 0, 1), dtype, s.name, out);
        return true;
      case Role::kLinA:
        write_rows(la.a, v_rows(m, s, 0, 1), dtype, s.name, out);
        return true;
      case Role::kLinQkvz:
      case Role::kLinBa:
        write_fused(la, a, s.role == Role::kLinQkvz, dtype, s.name, out);
        return true;
      case Role::kLinConv:
        write_f32_as(conv_rows(m, s), dtype, s.name, out);
        return true;
      case Role::kLinDtBias:
      case Role::kLinALog:
        write_f32_as(head_vector(m, s), dtype, s.name, out);
        return true;
      case Role::kLinNorm:
        write_f32_as(std::vector<float>(la.norm.begin(), la.norm.end()), dtype, s.name, out);
        return true;
      case Role::kLinOut:
        write_out_columns(m, s, dtype, out);
        return true;
      case Role::kSharedExpGate:
        write_f32_as(std::vector<float>(w.shared_gate.begin(), w.shared_gate.end()), dtype, s.name,
                     out);
        return true;
      default:
        return false;
    }
  }

  // Stored dtype of a slot produce() writes (nullopt: not one).
  std::optional<DType> stored_dtype(const Model& m, const TensorSlot& s) const override {
    if (s.layer < 0) return std::nullopt;
    const LayerWeights& w = m.layer(s.layer);
    const LinearAttnWeights& la = w.linear;
    switch (s.role) {
      case Role::kLinQkv:
      case Role::kLinQkvz:
        return model_dtype(la.qkv.dtype);
      case Role::kLinZ:
        return model_dtype(la.z.dtype);
      case Role::kLinB:
      case Role::kLinBa:
        return model_dtype(la.b.dtype);
      case Role::kLinA:
        return model_dtype(la.a.dtype);
      case Role::kLinOut:
        return model_dtype(la.out.dtype);
      case Role::kLinConv:
        return s.f32_only ? DType::kF32 : la.conv.source_dtype;
      case Role::kLinDtBias:
        return la.dt_bias.source_dtype;
      case Role::kLinALog:
        return la.a_neg.source_dtype;
      case Role::kLinNorm:
        return la.norm.source_dtype;
      case Role::kSharedExpGate:
        return w.shared_gate.source_dtype;
      default:
        return std::nullopt;
    }
  }

  // Qwen3.5 / 3.6 35B-A3B (= transformers' Qwen3_5MoeTextConfig defaults) and Qwen3-Next-80B:
  // groups of three Gated DeltaNet layers and one gated full-attention layer.
  bool shape(std::string_view name, ModelConfig& c) const override {
    if (name != "Qwen3.6-35B-A3B" && name != "qwen3.6-35b-a3b" && name != "Qwen3-Next-80B-A3B" &&
        name != "qwen35moe-small" && name != "qwen3next-small")
      return false;
    const bool small = name == "qwen35moe-small" || name == "qwen3next-small";
    const bool next = name == "Qwen3-Next-80B-A3B" || name == "qwen3next-small";
    c.family = next ? Family::kQwen3Next : Family::kQwen35Moe;
    c.vocab = small ? 300 : next ? 151936 : 248320;
    c.hidden = small ? 64 : 2048;
    c.layers = small ? 4 : next ? 48 : 40;
    c.heads = small ? 4 : 16;
    c.kv_heads = 2;
    c.head_dim = small ? 16 : 256;
    c.rope_dim = c.head_dim / 4;  // partial_rotary_factor 0.25
    c.rms_eps = 1e-6f;
    c.rope_theta = small ? 10000.0f : 1e7f;
    c.max_positions = small ? 4096 : 262144;
    c.linear = {.conv_kernel = 4,
                .k_heads = small ? 2 : 16,
                .v_heads = small ? 4 : 32,
                .k_head_dim = small ? 16 : 128,
                .v_head_dim = small ? 16 : 128,
                .v_heads_tiled = false};
    c.experts = small ? 16 : next ? 512 : 256;
    c.top_k = small ? 4 : next ? 10 : 8;
    c.expert_ffn = small ? 32 : 512;
    c.shared_ffn = small ? 32 : 512;
    c.norm_topk_prob = true;
    c.qk_norm = QkNorm::kPerHead;
    c.attn_output_gate = true;
    c.shared_expert_gate = true;
    c.norm_plus_one = true;
    c.linear_layer.assign(static_cast<size_t>(c.layers), 0);
    for (int l = 0; l < c.layers; ++l) c.linear_layer[static_cast<size_t>(l)] = (l + 1) % 4 != 0;
    if (small) c.eos_token = 296;
    return true;
  }
};

}  // namespace

const FamilyDef& qwen3next_family() {
  static const Hybrid family({.id = Family::kQwen3Next,
                              .name = "qwen3next",
                              .hf_types = kNextHfTypes,
                              .gguf_archs = kNextGgufArchs,
                              .attention = Mixer::kGqa,
                              .hybrid = true,
                              .hf_shared_expert = "mlp.shared_expert",
                              .gguf_ffn_norm = "post_attention_norm"});
  return family;
}

const FamilyDef& qwen35moe_family() {
  static const Hybrid family({.id = Family::kQwen35Moe,
                              .name = "qwen35moe",
                              .hf_types = kQwen35HfTypes,
                              .gguf_archs = kQwen35GgufArchs,
                              .attention = Mixer::kGqa,
                              .hybrid = true,
                              .hf_shared_expert = "mlp.shared_expert",
                              .gguf_ffn_norm = "post_attention_norm",
                              .shapes = kShapes,
                              .small_shapes = kSmallShapes});
  return family;
}

}  // namespace steermoe::model
