// The resolved description of a model: one plain struct filled in one place (from a HuggingFace
// config.json, hf_config.hpp, or from GGUF metadata, config_from_gguf), with every
// architecture quirk already decided. The forward pass reads these fields and never asks which
// file format or which transformers revision the model came from.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace steermoe::model {

class GgufFile;

enum class Family : uint8_t {
  kOlmoe,       // OLMoE: GQA attention, q/k RMSNorm over the whole projection, softmax router
  kQwen3Moe,    // Qwen3-MoE: GQA attention, per-head q/k RMSNorm, softmax router (renormalised).
                // Also the dense Qwen3 (model_type "qwen3", GGUF "qwen3"): the same model with
                // every layer a dense (mlp_only) layer and no experts at all.
  kDeepseekV3,  // DeepSeek-V3 / Moonlight: MLA attention, sigmoid router with correction bias
  kQwen3Next,   // Qwen3-Next: Gated DeltaNet + gated full attention, shared expert (sigmoid gate)
  kQwen35Moe,   // Qwen3.5 / Qwen3.6 MoE text model: as Qwen3-Next, projections stored split
};
// "olmoe", "qwen3moe", "deepseek", "qwen3next", "qwen35moe"
std::string_view family_name(Family family);
struct ModelConfig;
// The family name of a model, with the dense Qwen3 (no MoE layer) named "qwen3".
std::string_view family_name(const ModelConfig& config);
// Families with Gated DeltaNet (linear attention) layers and gated full attention.
bool is_hybrid(Family family);

enum class QkNorm : uint8_t { kNone, kWholeProjection, kPerHead };
enum class RopeKind : uint8_t { kNeox, kInterleaved };
enum class RouterScore : uint8_t { kSoftmax, kSigmoid };

// Upper bounds that every loaded config must respect (they keep allocations bounded for
// hostile files; real models are far below).
struct ConfigLimits {
  static constexpr int64_t kMaxLayers = 1024;
  static constexpr int64_t kMaxExperts = 4096;
  static constexpr int64_t kMaxHidden = 1 << 16;
  static constexpr int64_t kMaxHeads = 1024;
  static constexpr int64_t kMaxHeadDim = 4096;
  static constexpr int64_t kMaxFfn = 1 << 20;
  static constexpr int64_t kMaxVocab = 1 << 24;
  static constexpr int64_t kMaxLoraRank = 1 << 16;
  static constexpr int64_t kMaxConvKernel = 64;
};

// Rotary position scaling. Only YaRN is implemented (transformers' _compute_yarn_parameters and,
// for DeepSeek-style attention, yarn_get_mscale on the softmax scale).
enum class RopeScalingKind : uint8_t { kNone, kYarn };
struct RopeScaling {
  RopeScalingKind kind = RopeScalingKind::kNone;
  float factor = 1.0f;
  int original_max_positions = 0;  // pretraining context (original_max_position_embeddings)
  float beta_fast = 32.0f;
  float beta_slow = 1.0f;
  float mscale = 0.0f;            // 0: absent
  float mscale_all_dim = 0.0f;    // 0: absent
  float attention_factor = 0.0f;  // 0: derived from factor / mscale / mscale_all_dim
  bool truncate = true;
};

// Gated DeltaNet (linear attention) layers of Qwen3-Next / Qwen3.5-MoE.
struct LinearAttnConfig {
  int conv_kernel = 0;  // causal depthwise conv width (state keeps conv_kernel - 1 inputs)
  int k_heads = 0;      // query/key heads
  int v_heads = 0;      // value heads (a multiple of k_heads)
  int k_head_dim = 0;
  int v_head_dim = 0;
  // Value head j reads key head j % k_heads ("tiled", llama.cpp's qwen35moe GGUF order) instead
  // of j / (v_heads / k_heads) ("grouped", transformers' order).
  bool v_heads_tiled = false;
  int key_dim() const { return k_heads * k_head_dim; }
  int value_dim() const { return v_heads * v_head_dim; }
  int conv_dim() const { return 2 * key_dim() + value_dim(); }
};

// Multi-head latent attention (DeepSeek-V2/V3 style). Unused for GQA families.
struct MlaConfig {
  int q_lora_rank = 0;       // 0: q_proj directly; otherwise q_a_proj -> q_a_layernorm -> q_b_proj
  int kv_lora_rank = 0;      // width of the compressed latent c_kv
  int qk_nope_head_dim = 0;  // per-head query/key part without rotary embedding
  int qk_rope_head_dim = 0;  // per-head rotary part (the key's is shared by all heads)
  int v_head_dim = 0;        // per-head value width
  float lora_norm_eps = 1e-6f;  // eps of q_a_layernorm / kv_a_layernorm
};

struct ModelConfig {
  Family family = Family::kOlmoe;
  std::string source;  // file or folder it was read from (error messages, trace metadata)
  // "<arch>." when read from GGUF metadata: validate() then names the GGUF key of a field
  // ("olmoe.block_count"), not the HF config.json name ("num_hidden_layers").
  std::string gguf_prefix;

  // ---- shared dimensions ----
  int vocab = 0;
  int hidden = 0;
  int layers = 0;
  int heads = 0;          // query heads
  int kv_heads = 0;       // key/value heads (GQA); MLA: = heads (keys are decompressed per head)
  int head_dim = 0;       // GQA: q/k/v head width. MLA: unused (see mla)
  int max_positions = 0;  // trained context length
  float rms_eps = 1e-5f;
  float rope_theta = 10000.0f;
  RopeKind rope = RopeKind::kNeox;
  QkNorm qk_norm = QkNorm::kNone;
  MlaConfig mla;  // family kDeepseekV3 only
  RopeScaling rope_scaling;
  int rope_dim = 0;        // rotated dims per head (partial rotary); 0 = the whole head
  float clip_qkv = 0.0f;   // OLMoE: clamp q, k, v to +-clip_qkv after projection; 0 = off
  // Hybrid families: [layers] 1 = Gated DeltaNet layer, 0 = full attention (empty otherwise).
  std::vector<uint8_t> linear_layer;
  LinearAttnConfig linear;
  bool attn_output_gate = false;    // q_proj also yields a per-head gate: out *= sigmoid(gate)
  bool shared_expert_gate = false;  // shared expert output *= sigmoid(w . x)
  // RMSNorm weights stored zero-centred, applied as (1 + w) (Gemma style). The loader folds the
  // 1 in (weights in memory are always the effective multiplier); the flag says how the HF file
  // stores them. GGUF stores them with the 1 added (llama.cpp).
  bool norm_plus_one = false;

  // ---- feed-forward / mixture of experts ----
  int experts = 0;                 // routed experts per MoE layer
  int top_k = 0;                   // routed experts executed per token
  int expert_ffn = 0;              // intermediate width of one routed expert
  int shared_ffn = 0;              // total intermediate width of the shared experts (0: none)
  int dense_ffn = 0;               // intermediate width of dense (non-MoE) layers
  std::vector<uint8_t> moe_layer;  // [layers]: 1 = MoE feed-forward, 0 = dense SwiGLU
  RouterScore router = RouterScore::kSoftmax;
  bool norm_topk_prob = false;         // renormalise the top-k weights to sum 1
  float routed_scaling_factor = 1.0f;  // multiplies the routed weights (DeepSeek)
  int n_group = 1;                     // group-limited routing: groups of experts
  int topk_group = 1;                  // groups kept
  bool correction_bias = false;        // sigmoid router: e_score_correction_bias present

  bool tied_embeddings = false;   // lm_head shares the token embedding matrix
  bool fp8_block_scales = false;  // HF quantization_config fp8 (128 x 128 weight_scale_inv)
  int bos_token = -1;             // -1: none known
  int eos_token = -1;

  // Derived helpers.
  int moe_layer_count() const;
  // False for a dense model (Qwen3 without experts): no router, no expert, nothing to route,
  // cache or offload; experts, top_k and expert_ffn are 0.
  bool has_moe() const { return moe_layer_count() > 0; }
  // Index of each MoE layer among MoE layers ([layers], -1 for dense layers).
  std::vector<int> moe_index() const;
  int q_head_dim() const;  // width of one query/key head (MLA: nope + rope)
  int v_dim() const;       // width of one value head
  // Softmax scale: q_head_dim^-0.5, times yarn_get_mscale(factor, mscale_all_dim)^2 for
  // DeepSeek-style YaRN.
  float attention_scale() const;
  bool is_linear(int layer) const {
    return !linear_layer.empty() && linear_layer[static_cast<size_t>(layer)] != 0;
  }
  int linear_layer_count() const;
  int rotary_dim() const;  // rotated dims of one query/key head
  // RoPE inverse frequencies [rotary_dim() / 2] (float32 as transformers computes them, YaRN
  // included) and the factor cos/sin are multiplied by (YaRN attention factor; 1 otherwise).
  std::vector<float> rope_inv_freq() const;
  float rope_attention_factor() const;

  // Checks ranges and consistency; throws steermoe::Error "<source>: <field>: <expected>".
  void validate() const;
  // One-line human summary ("olmoe: 16 layers, hidden 2048, 64 experts top-8, ...").
  std::string summary() const;
};

// Reads the GGUF metadata of an olmoe / qwen3moe / qwen3 / deepseek2 / qwen3next / qwen35moe
// file.
ModelConfig config_from_gguf(const GgufFile& file);

}  // namespace steermoe::model
