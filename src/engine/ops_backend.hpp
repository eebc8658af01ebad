// A ComputeBackend over an op set (ops.hpp): the block sequences of every family, written once.
// A backend is an Ops implementation plus this class (CpuBackend, the CUDA backend); nothing
// here knows which device runs the ops.
//
// The sequence of a layer (model::layer_mixer says which mixer a layer has):
//   attention(): a = rmsnorm(x); o = mixer(a); x += o; a = rmsnorm(x)
//     kGqa            q | k | v projections ([query | gate] per head for gated attention), q/k
//                     RMSNorm (whole projection or per head), clip_qkv, (partial, YaRN) RoPE,
//                     KV cache write, attention, o *= sigmoid(gate) (gated), o_proj
//     kMla            q (LoRA) and the compressed kv latent, its RMSNorm, kv_b decompression,
//                     RoPE on the rotary parts, per-head K / V into the cache, attention, o_proj
//     kGatedDeltaNet  qkv / z / b / a projections, the delta-rule recurrence (state zeroed at
//                     position 0), out_proj
//   router(): router (and pre-gate) logits to the host, scores on the host (router_scores.hpp)
//   moe(): routed experts (the MoE op) + the shared expert (times sigmoid(gate . a) where the
//          family has a shared-expert gate); x += o
//   dense_ffn(): SwiGLU; x += o          head(): final RMSNorm, lm_head
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "engine/backend.hpp"
#include "engine/ops.hpp"
#include "model/weights.hpp"

namespace steermoe::engine {

class OpsBackend : public ComputeBackend {
 public:
  ~OpsBackend() override;
  OpsBackend(const OpsBackend&) = delete;
  OpsBackend& operator=(const OpsBackend&) = delete;

  void embed(std::span<const int32_t> tokens) final;
  void attention(int layer, int n, int pos) final;
  RouterScores router(int layer, int next_moe_layer, int n) final;
  void moe(int layer, int n, std::span<const ExpertCall> calls) final;
  void moe_part(int layer, std::span<const ExpertCall> calls, std::span<const int32_t> picks,
                bool first, bool last) final;
  void dense_ffn(int layer, int n) final;
  void head(int n, std::span<float> all_logits) final;
  std::span<const float> logits() const final;
  int threads() const final { return ops_->threads(); }
  void release_kv(int position) final { ops_->release_kv(position); }
  size_t kv_resident_bytes() const final { return ops_->kv_resident_bytes(); }

 protected:
  // Prepares every non-expert weight of `model` on the ops, allocates the activations, the KV
  // cache (`context` positions) and the recurrent states, for up to `max_batch` tokens a call.
  OpsBackend(const model::Model& model, std::unique_ptr<Ops> ops, int context, int max_batch);

 private:
  struct Buffers;
  void allocate(int context);
  void gqa_attention(int layer, int n, int pos0);
  void mla_attention(int layer, int n, int pos0);
  void gated_deltanet(int layer, int n, int pos0);
  void swiglu_ffn(const model::SwigluWeights& w, int ffn, const float* in, int n, float* out);
  // The MoE block's shared expert (if any) into the shared buffer; then the routed sum plus it
  // into the residual.
  void shared_expert(int layer, int n);
  void add_moe_output(int layer, int n);
  // Where the host reads `count` floats of backend memory: in place, or a copy into `host`
  // (complete after ops_->sync()).
  const float* host_view(float* host, const float* src, size_t count);
  AttentionSpec attention_spec() const;

  const model::Model& model_;
  const model::ModelConfig& cfg_;
  int max_batch_ = 1;
  std::unique_ptr<Ops> ops_;
  std::unique_ptr<Buffers> b_;
};

}  // namespace steermoe::engine
