// The tensors a model file holds, per format, and writers for whole models. One enumeration
// (tensor_layout) serves `make-model` (random values) and `convert` (values from a loaded model),
// so the names, shapes and the GGUF <-> HF differences (stacked experts, MLA kv_b_proj split into
// attn_k_b / attn_v_b) live in one place.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "model/config.hpp"
#include "model/dtype.hpp"
#include "model/file_writer.hpp"
#include "model/gguf.hpp"
#include "model/weights.hpp"

namespace steermoe::model {

// What a stored tensor is, independent of its file name.
enum class Role : uint8_t {
  kEmbed,
  kOutput,
  kFinalNorm,
  kAttnNorm,
  kFfnNorm,
  kWq,
  kWk,
  kWv,
  kWo,
  kQNorm,
  kKNorm,
  kQa,
  kQaNorm,
  kQb,
  kKvA,
  kKvANorm,
  kKvB,
  kKB,
  kVB,
  kRouter,
  kRouterBias,
  kExpGate,
  kExpUp,
  kExpDown,
  kSharedGate,
  kSharedUp,
  kSharedDown,
  kDenseGate,
  kDenseUp,
  kDenseDown,
  // Hybrid families (Gated DeltaNet layers, shared expert gate).
  kLinQkv,         // HF in_proj_qkv / GGUF attn_qkv
  kLinZ,           // HF in_proj_z / GGUF attn_gate
  kLinQkvz,        // HF Qwen3-Next in_proj_qkvz (interleaved per key head)
  kLinB,           // HF in_proj_b / GGUF ssm_beta
  kLinA,           // HF in_proj_a / GGUF ssm_alpha
  kLinBa,          // HF Qwen3-Next in_proj_ba / GGUF qwen3next ssm_beta_alpha (interleaved)
  kLinConv,        // conv1d weight: HF [conv_dim, 1, K], GGUF [conv_dim, K]
  kLinDtBias,      // dt_bias / ssm_dt.bias
  kLinALog,        // HF A_log / GGUF ssm_a (= -exp(A_log))
  kLinNorm,        // gated RMSNorm weight
  kLinOut,         // out_proj / ssm_out
  kSharedExpGate,  // HF mlp.shared_expert_gate [1, H] / GGUF ffn_gate_inp_shexp [H]
};

struct TensorSlot {
  std::string name;
  std::vector<uint64_t> shape;  // row-major, outermost first (HF convention)
  Role role = Role::kEmbed;
  int layer = -1;   // -1: not per layer
  int expert = -1;  // routed-expert roles: the expert, or -1 for all experts stacked [E, ...]
  // Stored as F32 whatever the chosen type (GGUF ssm_conv1d: llama.cpp's ssm_conv reads only F32).
  bool f32_only = false;
  bool vector() const { return shape.size() == 1; }
  uint64_t elements() const;
};

// Every tensor of `config` in `format`, in the order a writer should store them.
std::vector<TensorSlot> tensor_layout(const ModelConfig& config, WeightFormat format);

// llama.cpp's general.architecture of a family ("olmoe", "qwen3moe", "deepseek2", "qwen3next",
// "qwen35moe").
std::string gguf_arch_name(Family family);
// The same for one model: "qwen3" for the dense Qwen3 (no MoE layer).
std::string gguf_arch_name(const ModelConfig& config);

// The GGUF metadata of a config (general.*, <arch>.*), the inverse of config_from_gguf.
std::vector<std::pair<std::string, GgufValue>> gguf_model_metadata(const ModelConfig& config,
                                                                   const std::string& name);

// Values of a slot. `dtype_of` chooses its stored dtype; `produce` writes its bytes.
struct SlotSource {
  std::function<DType(const TensorSlot&)> dtype_of;
  std::function<void(const TensorSlot&, DType, OutputFile&)> produce;
};

// Writes a model: `path` ending in .gguf gives one GGUF (with `extra_gguf` metadata, e.g. the
// tokenizer); otherwise a folder with config.json and model.safetensors.
void write_model(const ModelConfig& config, const std::filesystem::path& path,
                 const SlotSource& source,
                 const std::vector<std::pair<std::string, GgufValue>>& extra_gguf = {});

// Chooses a slot's output dtype from the slot and its stored dtype (convert: keep it where the
// format can hold it; quantize: the mixture).
using DTypeChooser = std::function<DType(const TensorSlot&, DType stored)>;

// Source reading every slot from a loaded model (for convert and quantize): without a chooser
// matrices keep their dtype (bytes copied unchanged) and vectors their source dtype; a chosen
// dtype that differs is produced by dequantizing to f32 and encoding (quantizing) row by row.
// The MLA split / rebuild and expert stacking are done here.
// `threads` threads convert (dequantize and quantize) the rows.
SlotSource model_slot_source(const Model& model, DTypeChooser choose = {}, int threads = 1);
// The dtype a slot has in the loaded model.
DType stored_dtype(const Model& model, const TensorSlot& slot);

// Source of random weights (for make-model): matrices uniform with std 1/sqrt(fan_in), the
// embedding std 1, norm weights 1 + std 0.1, correction bias std 0.1 (variances as the oracle's
// init scheme; uniform rather than normal because it is ~10x faster for multi-GB models).
// Matrices are stored as `dtype`, vectors as F32. Deterministic in `seed`.
SlotSource random_slot_source(DType dtype, uint64_t seed);
// The same values stored as `dtype_of` chooses per slot (a quantization mixture: make-model
// --type), streamed chunk by chunk (no f32 or BF16 copy of a tensor is ever whole), the values
// drawn and quantized by `threads` threads (the bytes do not depend on the thread count).
SlotSource random_slot_source(std::function<DType(const TensorSlot&)> dtype_of, uint64_t seed,
                              int threads);

// Real shapes: "OLMoE-1B-7B", "Qwen3-30B-A3B", "Moonlight-16B-A3B", "Qwen3.6-35B-A3B" (also
// spelled "qwen3.6-35b-a3b"), "Qwen3-Next-80B-A3B", and "small" versions ("olmoe-small",
// "qwen3moe-small", "deepseek-small", "qwen35moe-small", "qwen3next-small") for tests. Throws
// Error for others.
ModelConfig shape_config(const std::string& shape);

}  // namespace steermoe::model
