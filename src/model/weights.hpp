// A loaded model: its resolved config and every weight bound by name, dtype and shape. Weights
// stay in the memory-mapped file (F32, F16, BF16 used in place); only small tensors (norm
// vectors, the correction bias) and tensors that must be rearranged (DeepSeek's kv_b_proj
// rebuilt from GGUF attn_k_b / attn_v_b) are copied.
//
// A model is named by a path: a `.gguf` file, or a HuggingFace folder with config.json and
// model.safetensors (or a sharded model.safetensors.index.json). Experts are accepted per
// expert (`mlp.experts.E.gate_proj.weight`) or fused as in transformers v5
// (`mlp.experts.gate_up_proj` [E, 2I, H], `mlp.experts.down_proj` [E, H, I]).
#pragma once

#include <cstddef>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kernels/kernels.hpp"
#include "model/config.hpp"
#include "model/dtype.hpp"

namespace steermoe::model {

class GgufFile;
class Checkpoint;

enum class WeightFormat : uint8_t { kGguf, kSafetensors };

// A small tensor (norm weight, correction bias) converted to f32 at load time; remembers the
// dtype it was stored in so that `convert` writes it back unchanged.
struct WeightVector : std::vector<float> {
  DType source_dtype = DType::kF32;
};

// One SwiGLU block: down(silu(gate x) * up x). Rows: gate/up [ffn, hidden], down [hidden, ffn].
struct SwigluWeights {
  kernels::Matrix gate, up, down;
  bool present() const { return gate.data != nullptr; }
};

// One Gated DeltaNet (linear attention) layer, in one canonical layout whatever the file stored
// (Qwen3-Next's fused interleaved in_proj_qkvz / in_proj_ba are rearranged at load; Qwen3.5's
// split projections and both GGUF layouts are used in place). Value heads are in the order
// config.linear.v_heads_tiled says.
struct LinearAttnWeights {
  kernels::Matrix qkv;   // [2 * key_dim + value_dim, hidden]: rows q | k | v
  kernels::Matrix z;     // [value_dim, hidden] output gate
  kernels::Matrix b;     // [v_heads, hidden] beta = sigmoid(b x)
  kernels::Matrix a;     // [v_heads, hidden] decay input
  WeightVector conv;     // [conv_dim * conv_kernel] depthwise causal conv, per channel
  WeightVector dt_bias;  // [v_heads]
  WeightVector a_neg;    // [v_heads] -exp(A_log) (GGUF ssm_a)
  WeightVector norm;     // [v_head_dim] gated RMSNorm weight (plain, not 1 + w)
  kernels::Matrix out;   // [hidden, value_dim]
  bool present() const { return qkv.data != nullptr; }
};

struct LayerWeights {
  WeightVector attn_norm;  // [hidden]
  WeightVector ffn_norm;   // [hidden]

  // GQA attention (OLMoE, Qwen3-MoE).
  kernels::Matrix wq;   // [heads * head_dim, hidden]
  kernels::Matrix wk;   // [kv_heads * head_dim, hidden]
  kernels::Matrix wv;   // [kv_heads * head_dim, hidden]
  WeightVector q_norm;  // OLMoE: [heads * head_dim]; Qwen3: [head_dim]
  // Gated full attention (hybrid families): wq has [heads * 2 * head_dim] rows, per head
  // [query | gate]; norms (1 + w) are folded to effective weights at load.
  WeightVector k_norm;  // OLMoE: [kv_heads * head_dim]; Qwen3: [head_dim]

  // MLA attention (DeepSeek-V3).
  kernels::Matrix q_a;     // [q_lora, hidden]          (q LoRA only)
  WeightVector q_a_norm;   // [q_lora]                  (q LoRA only)
  kernels::Matrix q_b;     // [heads * (nope + rope), q_lora] or q_proj [.., hidden]
  kernels::Matrix kv_a;    // [kv_lora + rope, hidden]: rows [latent | rope part]
  WeightVector kv_a_norm;  // [kv_lora]
  kernels::Matrix kv_b;    // [heads * (nope + v), kv_lora]: per head [k_nope | v]

  kernels::Matrix wo;  // [hidden, heads * v_dim]

  // Gated DeltaNet layers (hybrid families) instead of attention.
  LinearAttnWeights linear;

  // Feed-forward: MoE layers use router/experts/shared, dense layers use `dense`.
  bool moe = false;
  kernels::Matrix router;              // [experts, hidden]
  WeightVector router_bias;            // [experts] e_score_correction_bias (or empty)
  std::vector<SwigluWeights> experts;  // [experts]
  SwigluWeights shared;                // shared experts as one block (or absent)
  WeightVector shared_gate;            // [hidden] shared expert gate (Qwen3-Next / 3.5) or empty
  SwigluWeights dense;                 // dense layers
};

class Model {
 public:
  // Loads a .gguf file or an HF folder. Throws steermoe::Error naming file, tensor and the
  // expected dtype/shape on any mismatch. The weights stay in the file's mapping until
  // prepare_for_compute(): a memory budget is checked against the model before any of them is
  // copied into memory.
  static std::unique_ptr<Model> load(const std::filesystem::path& path);
  // Moves everything but the routed experts' bytes into 2 MiB pages at the same addresses (decode
  // streams them every token; MappedFile::promote_to_huge_pages), once; the Engine calls it.
  // Thread-safe and idempotent; the weights' addresses and values do not change.
  void prepare_for_compute() const;
  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  const ModelConfig& config() const { return config_; }
  WeightFormat format() const { return format_; }
  const std::filesystem::path& path() const { return path_; }
  const LayerWeights& layer(int l) const { return layers_[static_cast<size_t>(l)]; }
  const kernels::Matrix& lm_head() const { return lm_head_; }
  const WeightVector& final_norm() const { return final_norm_; }
  // The embedding row of `token` in f32 (token must be < vocab; checked by the caller).
  void embed(int token, float* out) const;
  // The token embedding as stored (used in place; rows are dequantized on lookup).
  const TensorView& embedding() const { return embed_; }
  // Storage dtype of the big matrices (the embedding's), e.g. for reports.
  DType weight_dtype() const { return embed_.dtype; }
  // Bytes one decoded token reads from the weights at batch 1 with the given routed experts per
  // MoE layer (attention + router + shared + top_k experts + lm_head + one embedding row).
  uint64_t bytes_per_token() const;

  // The GGUF file with the model's metadata (the first of a split model's files), or null.
  const GgufFile* gguf() const { return gguf_files_.empty() ? nullptr : &gguf_files_.front(); }
  // Every GGUF file holding the model's tensors: one, or a split model's files in order.
  const std::vector<GgufFile>& gguf_files() const { return gguf_files_; }
  const Checkpoint* checkpoint() const { return checkpoint_.get(); }

 private:
  Model() = default;
  friend class WeightBinder;
  // Everything in the mapped files but the routed experts' bytes (attention, norms, shared
  // experts, routers, embedding, head) moved into 2 MiB pages at the same addresses
  // (MappedFile::promote_to_huge_pages): decode streams them every token.
  void promote_non_expert_weights();

  ModelConfig config_;
  WeightFormat format_ = WeightFormat::kGguf;
  std::filesystem::path path_;
  std::vector<GgufFile> gguf_files_;
  std::unique_ptr<Checkpoint> checkpoint_;
  TensorView embed_;
  kernels::Matrix lm_head_;
  WeightVector final_norm_;
  std::vector<LayerWeights> layers_;
  std::vector<std::vector<std::byte>> owned_;  // rearranged / converted tensors
  std::unique_ptr<std::once_flag> promoted_ = std::make_unique<std::once_flag>();
};

// Bytes of a matrix: kernels::stored_bytes (elements in the stored type, plus FP8 scales). The
// one helper for expert copies, bytes_per_token and traces' expert_bytes; the ranges to copy
// are kernels::matrix_ranges.
uint64_t matrix_bytes(const kernels::Matrix& m);

// The kernels dtype of a stored dtype the kernels use in place (F32, BF16, F16, the block types,
// F8_E4M3); nullopt for the others (F64, integers), which are converted to an F32 copy.
std::optional<kernels::DType> kernel_dtype(DType dtype);
DType model_dtype(kernels::DType dtype);

}  // namespace steermoe::model
