// The CPU compute backend: fp32 activations over F32 / BF16 / F16 weights used in place from the
// mapped file, kernels from kernels/ (scalar reference + AVX2 / AVX-512 with runtime dispatch),
// an f32 KV cache in RAM, and for the hybrid families (Qwen3-Next, Qwen3.5-MoE) the recurrent
// state of each Gated DeltaNet layer (gated_deltanet.hpp), reset when a sequence starts (pos 0). Every buffer is sized at construction for `max_batch` tokens and the
// full context, so decoding allocates nothing.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "engine/backend.hpp"
#include "engine/cpu/gated_deltanet.hpp"
#include "engine/kv_cache.hpp"
#include "kernels/kernels.hpp"
#include "model/weights.hpp"

namespace steermoe::engine {

struct CpuBackendParams {
  int threads = 1;    // kernel threads (1..1024)
  int context = 1;    // KV cache positions
  int max_batch = 1;  // tokens per block call
};

class CpuBackend final : public ComputeBackend {
 public:
  CpuBackend(const model::Model& model, const CpuBackendParams& params);
  ~CpuBackend() override;

  void embed(std::span<const int32_t> tokens) override;
  void attention(int layer, int n, int pos) override;
  RouterScores router(int layer, int next_moe_layer, int n) override;
  void moe(int layer, int n, std::span<const ExpertCall> calls) override;
  void dense_ffn(int layer, int n) override;
  void head(int n, std::span<float> all_logits) override;
  std::span<const float> logits() const override;
  int threads() const override { return static_cast<int>(pool_.size()); }

 private:
  struct Scratch;
  void attention_gqa(int layer, int n, int pos);
  void attention_mla(int layer, int n, int pos);
  void swiglu_block(const model::SwigluWeights& w, int ffn, const float* in, int n, float* out);

  const model::Model& model_;
  const model::ModelConfig& cfg_;
  CpuBackendParams params_;
  kernels::ThreadPool pool_;
  KvCache kv_;
  std::unique_ptr<Scratch> s_;
  // RoPE frequencies from the config (YaRN / partial rotary) and the cos/sin factor.
  std::vector<float> rope_inv_freq_;
  float rope_factor_ = 1.0f;
  bool rope_scaled_ = false;
  // Hybrid families: one recurrent state per Gated DeltaNet layer (empty for the others; zeroed
  // when a sequence starts, i.e. at position 0) and the block that runs them.
  std::vector<LinearAttnState> linear_state_;
  std::unique_ptr<GatedDeltaNet> gdn_;
};

}  // namespace steermoe::engine
