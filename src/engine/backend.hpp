// The compute backend: the forward pass's blocks on one device, called by the backend-neutral
// loop in engine.cpp. The loop owns the order (embedding, per layer attention then router then
// the host policy step then MoE or dense FFN, the head) and the routing; a backend owns the
// activations, the KV cache and the kernels. The CPU backend is engine/cpu/; a CUDA backend is a
// second implementation of this interface, never a copy of the loop.
//
// Activations live in the backend; only router scores come back to the host (the one
// synchronisation a MoE layer needs), and only expert references go in.
#pragma once

#include <cstdint>
#include <span>

#include "model/weights.hpp"

namespace steermoe::engine {

// How a batched prefill runs a Gated DeltaNet layer's delta rule (docs/determinism.md):
// kRecurrent token by token, exactly what decoding computes (the default); kChunked in the
// chunked form (kernels::delta_rule_chunked) over chunks of kDeltaRuleChunk tokens counted from
// the start of each prefill call, which rounds differently (within a tolerance of the recurrence,
// still a function of the tokens and the chunk size only, never of the thread count). Decode
// (one token per call) is token by token either way. CPU backend only.
enum class DeltaRulePrefill { kRecurrent, kChunked };
inline constexpr int kDeltaRuleChunk = 32;

// Router output of one MoE layer for n tokens, host-visible, rows [n][E].
struct RouterScores {
  std::span<const float> z;              // selection scores the policy ranks by
  std::span<const float> weight_scores;  // scores execution weights come from (sigmoid: unbiased)
  std::span<const float> pregate_next;   // router of the next MoE layer on this layer's MoE input
                                         // (empty when not asked for)
};

// One routed expert applied to one token: the weights (from the expert store) and its weight.
struct ExpertCall {
  const model::SwigluWeights* weights = nullptr;
  int32_t expert = 0;  // expert id (groups a batch by expert)
  int32_t slot = 0;    // cache slot it is executed from
  float weight = 0.0f;
};

class ComputeBackend {
 public:
  virtual ~ComputeBackend() = default;

  // The residual stream of n tokens from their embeddings.
  virtual void embed(std::span<const int32_t> tokens) = 0;
  // Attention block of `layer` for n tokens at positions pos .. pos + n - 1 (KV cache written),
  // added to the residual; then the FFN input (post-attention norm) is formed.
  virtual void attention(int layer, int n, int pos) = 0;
  // Router scores of MoE layer `layer` for the n tokens and, if `next_moe_layer` >= 0, the
  // pre-gate scores of that layer from the same FFN input.
  virtual RouterScores router(int layer, int next_moe_layer, int n) = 0;
  // MoE block: calls [n][K] (token-major; each token's calls in ascending expert order) plus the
  // shared experts, added to the residual.
  virtual void moe(int layer, int n, std::span<const ExpertCall> calls) = 0;
  // One token's MoE block in parts (schedule::MoeWait::kReady): the calls at `picks` now; at
  // `last` the block's output is added to the residual, bit for bit as moe(layer, 1, calls)
  // adds it. This default computes everything at the last part.
  virtual void moe_part(int layer, std::span<const ExpertCall> calls,
                        std::span<const int32_t> /*picks*/, bool /*first*/, bool last) {
    if (last) moe(layer, 1, calls);
  }
  // Dense FFN block, added to the residual.
  virtual void dense_ffn(int layer, int n) = 0;
  // Final norm and output head: all n tokens' logits into `all_logits` ([n][vocab]) when it is
  // non-empty; the last token's logits into logits() always.
  virtual void head(int n, std::span<float> all_logits) = 0;
  // Logits of the last token of the last head() ([vocab]; valid until the next call).
  virtual std::span<const float> logits() const = 0;
  virtual int threads() const = 0;
  // KV memory of positions from `position` on back to the system (none by default).
  virtual void release_kv(int /*position*/) {}
  virtual size_t kv_resident_bytes() const { return 0; }
};

}  // namespace steermoe::engine
