#include "model/weights.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "common/error.hpp"
#include "model/family_def.hpp"
#include "model/gguf.hpp"
#include "model/hf_config.hpp"
#include "model/safetensors.hpp"
#include "model/weights_binder.hpp"

namespace steermoe::model {

uint64_t matrix_bytes(const kernels::Matrix& m) {
  return kernels::stored_bytes(m);
}

std::optional<kernels::DType> kernel_dtype(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return kernels::DType::kF32;
    case DType::kBF16:
      return kernels::DType::kBF16;
    case DType::kF16:
      return kernels::DType::kF16;
    case DType::kF8E4M3:
      return kernels::DType::kF8E4M3;
    default:
      if (dtype_is_quantized(dtype)) {
        return static_cast<kernels::DType>(static_cast<int>(kernels::DType::kQ8_0) +
                                           static_cast<int>(dtype) -
                                           static_cast<int>(DType::kQ8_0));
      }
      return std::nullopt;
  }
}

DType model_dtype(kernels::DType dtype) {
  switch (dtype) {
    case kernels::DType::kF32:
      return DType::kF32;
    case kernels::DType::kBF16:
      return DType::kBF16;
    case kernels::DType::kF16:
      return DType::kF16;
    case kernels::DType::kF8E4M3:
      return DType::kF8E4M3;
    default:
      return static_cast<DType>(static_cast<int>(DType::kQ8_0) + static_cast<int>(dtype) -
                                static_cast<int>(kernels::DType::kQ8_0));
  }
}

namespace {

std::string layer_name(const WeightBinder& b, int l, const char* gguf_name, const char* hf_name) {
  return b.layer_name(l, gguf_name, hf_name);
}

// The family's GGUF name of the norm before the feed-forward block; a Qwen3-Next / Qwen3.5 GGUF
// that steermoe wrote before 2026-12-07 has it as ffn_norm, which is still read.
std::string ffn_norm_name(const WeightBinder& b, const ModelConfig& c, int l) {
  const std::string name =
      layer_name(b, l, family_def(c.family).gguf_ffn_norm, "post_attention_layernorm");
  if (b.gguf() && !b.has(name)) {
    std::string legacy = layer_name(b, l, "ffn_norm", "post_attention_layernorm");
    if (b.has(legacy)) return legacy;
  }
  return name;
}

SwigluWeights bind_swiglu(WeightBinder& b, int l, const char* gguf_suffix, const char* hf_prefix,
                          uint64_t hidden, uint64_t ffn) {
  SwigluWeights s;
  const std::string g = fmt::format("ffn_gate{}", gguf_suffix);
  const std::string u = fmt::format("ffn_up{}", gguf_suffix);
  const std::string d = fmt::format("ffn_down{}", gguf_suffix);
  const std::string hg = fmt::format("{}.gate_proj", hf_prefix);
  const std::string hu = fmt::format("{}.up_proj", hf_prefix);
  const std::string hd = fmt::format("{}.down_proj", hf_prefix);
  s.gate = b.matrix(layer_name(b, l, g.c_str(), hg.c_str()), ffn, hidden);
  s.up = b.matrix(layer_name(b, l, u.c_str(), hu.c_str()), ffn, hidden);
  s.down = b.matrix(layer_name(b, l, d.c_str(), hd.c_str()), hidden, ffn);
  return s;
}

void bind_experts(WeightBinder& b, const ModelConfig& c, int l, LayerWeights& w) {
  const auto E = static_cast<uint64_t>(c.experts);
  const auto H = static_cast<uint64_t>(c.hidden);
  const auto I = static_cast<uint64_t>(c.expert_ffn);
  w.experts.resize(E);
  if (b.gguf()) {
    const std::string p = fmt::format("blk.{}.", l);
    if (b.has(p + "ffn_gate_up_exps.weight")) {
      TensorView gu = b.require(p + "ffn_gate_up_exps.weight", {E, 2 * I, H});
      for (uint64_t e = 0; e < E; ++e) {
        w.experts[e].gate = b.stacked(gu, e, I, H, 2 * I, 0);
        w.experts[e].up = b.stacked(gu, e, I, H, 2 * I, I);
      }
    } else {
      TensorView g = b.require(p + "ffn_gate_exps.weight", {E, I, H});
      TensorView u = b.require(p + "ffn_up_exps.weight", {E, I, H});
      for (uint64_t e = 0; e < E; ++e) {
        w.experts[e].gate = b.stacked(g, e, I, H, I, 0);
        w.experts[e].up = b.stacked(u, e, I, H, I, 0);
      }
    }
    TensorView d = b.require(p + "ffn_down_exps.weight", {E, H, I});
    for (uint64_t e = 0; e < E; ++e) w.experts[e].down = b.stacked(d, e, H, I, H, 0);
    return;
  }
  const std::string p = b.hf_layer(l) + "mlp.experts.";
  if (b.has(p + "gate_up_proj")) {  // transformers v5 fused layout (no .weight suffix)
    TensorView gu = b.require(p + "gate_up_proj", {E, 2 * I, H});
    TensorView d = b.require(p + "down_proj", {E, H, I});
    for (uint64_t e = 0; e < E; ++e) {
      w.experts[e].gate = b.stacked(gu, e, I, H, 2 * I, 0);
      w.experts[e].up = b.stacked(gu, e, I, H, 2 * I, I);
      w.experts[e].down = b.stacked(d, e, H, I, H, 0);
    }
    return;
  }
  for (uint64_t e = 0; e < E; ++e) {
    const std::string q = fmt::format("{}{}.", p, e);
    w.experts[e].gate = b.matrix(q + "gate_proj.weight", I, H);
    w.experts[e].up = b.matrix(q + "up_proj.weight", I, H);
    w.experts[e].down = b.matrix(q + "down_proj.weight", H, I);
  }
}

void bind_ffn(WeightBinder& b, const ModelConfig& c, int l, LayerWeights& w) {
  const auto H = static_cast<uint64_t>(c.hidden);
  w.moe = c.moe_layer[static_cast<size_t>(l)] != 0;
  if (!w.moe) {
    w.dense = bind_swiglu(b, l, "", "mlp", H, static_cast<uint64_t>(c.dense_ffn));
    return;
  }
  w.router =
      b.matrix(layer_name(b, l, "ffn_gate_inp", "mlp.gate"), static_cast<uint64_t>(c.experts), H);
  if (c.correction_bias) {
    const std::string name = b.gguf() ? fmt::format("blk.{}.exp_probs_b.bias", l)
                                      : b.hf_layer(l) + "mlp.gate.e_score_correction_bias";
    w.router_bias = b.vector(name, static_cast<uint64_t>(c.experts));
  }
  bind_experts(b, c, l, w);
  if (c.shared_ffn > 0) {
    w.shared = bind_swiglu(b, l, "_shexp", family_def(c.family).hf_shared_expert, H,
                           static_cast<uint64_t>(c.shared_ffn));
  }
  if (c.shared_expert_gate) {
    w.shared_gate =
        b.gguf() ? b.vector(layer_name(b, l, "ffn_gate_inp_shexp", ""), H)
                 : b.vector_of_shape(b.hf_layer(l) + "mlp.shared_expert_gate.weight", {1, H});
  }
}

// A tensor of a layer past block_count is a file whose metadata and tensors disagree (llama.cpp
// refuses it too: "wrong number of tensors"). Layers in [layers, block_count) are the
// multi-token-prediction layers (nextn_predict_layers), present and not read.
void refuse_layers_past_block_count(const std::vector<GgufFile>& files, const ModelConfig& c) {
  const std::string key = c.gguf_prefix + "block_count";
  const int64_t block_count = files.front().get_int(key);
  for (const GgufFile& f : files) {
    for (const GgufTensorInfo& info : f.tensor_infos()) {
      if (info.name.rfind("blk.", 0) != 0) continue;
      const char* digits = info.name.c_str() + 4;
      char* end = nullptr;
      const long long layer = std::strtoll(digits, &end, 10);
      if (end == digits || *end != '.') continue;
      if (layer >= block_count) {
        fail(f.name(), "tensor '" + info.name + "'",
             "layer {} is past the {} layers of metadata key '{}'", layer, block_count, key);
      }
    }
  }
}

}  // namespace

std::unique_ptr<Model> Model::load(const std::filesystem::path& path) {
  std::unique_ptr<Model> m(new Model());
  m->path_ = path;
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    m->format_ = WeightFormat::kSafetensors;
    m->config_ = load_hf_config(path / "config.json");
    m->checkpoint_ = std::make_unique<Checkpoint>(Checkpoint::open(path));
  } else if (is_gguf_path(path)) {
    m->format_ = WeightFormat::kGguf;
    m->gguf_files_ = open_gguf_split(path);  // one file, or every file of a split model
    m->config_ = config_from_gguf(m->gguf_files_.front());
    refuse_layers_past_block_count(m->gguf_files_, m->config_);
  } else {
    fail(path.string(), "model path",
         "expected a .gguf file or a folder with config.json and safetensors");
  }
  const ModelConfig& c = m->config_;
  WeightBinder b(*m);
  b.set_where(path.string());
  const auto V = static_cast<uint64_t>(c.vocab);
  const auto H = static_cast<uint64_t>(c.hidden);
  const bool gguf = b.gguf();
  if (!gguf && !b.has("model.embed_tokens.weight") &&
      b.has("model.language_model.embed_tokens.weight")) {
    b.set_hf_prefix("model.language_model.");  // Qwen3.5 ...ForConditionalGeneration
  }
  const std::string embed_name = gguf ? "token_embd.weight" : b.hf_prefix() + "embed_tokens.weight";
  m->embed_ = b.require(embed_name, {V, H});
  if (m->embed_.dtype == DType::kF8E4M3) {
    fail(path.string(), "tensor '" + m->embed_.name + "'",
         "expected a token embedding in F32, F16, BF16 or a GGUF block type, found F8_E4M3");
  }
  m->final_norm_ = b.vector(gguf ? "output_norm.weight" : b.hf_prefix() + "norm.weight", H);
  const std::string head = gguf ? "output.weight" : "lm_head.weight";
  if (c.tied_embeddings || !b.has(head)) {
    if (!c.tied_embeddings && !gguf) {
      fail(path.string(), "tensor 'lm_head.weight'", "missing (expected shape [{}, {}])", V, H);
    }
    m->lm_head_ = b.matrix(embed_name, V, H);
  } else {
    m->lm_head_ = b.matrix(head, V, H);
  }
  m->layers_.resize(static_cast<size_t>(c.layers));
  for (int l = 0; l < c.layers; ++l) {
    LayerWeights& w = m->layers_[static_cast<size_t>(l)];
    w.attn_norm = b.vector(layer_name(b, l, "attn_norm", "input_layernorm"), H);
    w.ffn_norm = b.vector(ffn_norm_name(b, c, l), H);
    family_def(c.family).bind_mixer(b, c, l, w);
    bind_ffn(b, c, l, w);
  }
  if (c.norm_plus_one && !gguf) {
    // (1 + w) RMSNorm: fold the 1 in (exact in f32 for bf16/f16/f32 weights), so that every
    // format runs the same plain weights (GGUF stores them folded, as llama.cpp converts them).
    auto fold = [](WeightVector& v) {
      for (float& x : v) x = 1.0f + x;
      v.source_dtype = DType::kF32;
    };
    fold(m->final_norm_);
    for (LayerWeights& w : m->layers_) {
      fold(w.attn_norm);
      fold(w.ffn_norm);
      if (!w.q_norm.empty()) fold(w.q_norm);
      if (!w.k_norm.empty()) fold(w.k_norm);
    }
  }
  // The weights are used in place from the mapping: a file rewritten while it was being bound
  // is refused now (a later shrink is caught by the SIGBUS guard, common/mapped_ranges.hpp).
  for (const GgufFile& f : m->gguf_files_) f.check_unchanged();
  if (m->checkpoint_) m->checkpoint_->check_unchanged();
  return m;
}

void Model::prepare_for_compute() const {
  std::call_once(*promoted_, [this] {
    const_cast<Model*>(this)->promote_non_expert_weights();
    // Copied from the mapping only now: a file rewritten since it was bound is refused.
    for (const GgufFile& f : gguf_files_) f.check_unchanged();
    if (checkpoint_) checkpoint_->check_unchanged();
  });
}

void Model::promote_non_expert_weights() {
  std::vector<MappedFile*> mappings;
  for (GgufFile& f : gguf_files_) mappings.push_back(&f.mapping());
  if (checkpoint_)
    for (size_t i = 0; i < checkpoint_->shard_count(); ++i)
      mappings.push_back(&checkpoint_->shard(i).mapping());
  // The routed experts' bytes stay file-backed: the offloading links read them from the file
  // (O_DIRECT) and the all-resident store copies them into an arena of its own.
  std::vector<std::pair<const std::byte*, const std::byte*>> experts;
  for (const LayerWeights& w : layers_)
    for (const SwigluWeights& e : w.experts)
      for (const kernels::Matrix* m : {&e.gate, &e.up, &e.down})
        if (m->data != nullptr) {
          const kernels::MatrixRanges ranges = kernels::matrix_ranges(*m);
          for (size_t r = 0; r < ranges.count; ++r) {
            const auto* data = static_cast<const std::byte*>(ranges.range[r].data);
            experts.emplace_back(data, data + ranges.range[r].bytes);
          }
        }
  std::sort(experts.begin(), experts.end());
  for (MappedFile* file : mappings) {
    if (file->data() == nullptr) continue;
    const std::byte* at = file->data();
    const std::byte* end = file->data() + file->size();
    // The gaps between expert ranges inside this mapping.
    for (const auto& [begin, stop] : experts) {
      if (stop <= at || begin >= end) continue;
      if (begin > at)
        file->promote_to_huge_pages(static_cast<uint64_t>(at - file->data()),
                                    static_cast<uint64_t>(begin - at));
      at = std::max(at, stop);
    }
    if (at < end)
      file->promote_to_huge_pages(static_cast<uint64_t>(at - file->data()),
                                  static_cast<uint64_t>(end - at));
  }
}

Model::~Model() = default;

void Model::embed(int token, float* out) const {
  SM_ASSERT(token >= 0 && token < config_.vocab);
  const uint64_t row_bytes = *dtype_byte_size(embed_.dtype, static_cast<uint64_t>(config_.hidden));
  const std::byte* row = embed_.data + static_cast<uint64_t>(token) * row_bytes;
  convert_to_f32(embed_.dtype, {row, static_cast<size_t>(row_bytes)},
                 {out, static_cast<size_t>(config_.hidden)}, "token embedding");
}

uint64_t Model::bytes_per_token() const {
  uint64_t total = matrix_bytes(lm_head_);
  total += *dtype_byte_size(embed_.dtype, static_cast<uint64_t>(config_.hidden));
  for (const LayerWeights& w : layers_) {
    for (const kernels::Matrix* m :
         {&w.wq, &w.wk, &w.wv, &w.q_a, &w.q_b, &w.kv_a, &w.kv_b, &w.wo, &w.linear.qkv, &w.linear.z,
          &w.linear.b, &w.linear.a, &w.linear.out}) {
      if (m->data != nullptr) total += matrix_bytes(*m);
    }
    auto swiglu = [](const SwigluWeights& s) {
      return s.present() ? matrix_bytes(s.gate) + matrix_bytes(s.up) + matrix_bytes(s.down) : 0;
    };
    if (w.moe) {
      total += matrix_bytes(w.router) + swiglu(w.shared);
      total += static_cast<uint64_t>(config_.top_k) * swiglu(w.experts[0]);
    } else {
      total += swiglu(w.dense);
    }
  }
  return total;
}

}  // namespace steermoe::model
