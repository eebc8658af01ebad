// A benchmark hook: router and pre-gate scores supplied from outside (`bench --scores-from
// TRACE`), so that a model of real size but random weights routes like a trained one. The
// backend still computes its own router products (their cost stays in the timing); the policy
// then sees the supplied rows instead. The execution weights come from the supplied z for a
// softmax router, from the supplied weight scores for a sigmoid one (its z carries the bias).
#pragma once

#include <cstdint>
#include <span>

namespace steermoe::engine {

class ScoreSource {
 public:
  virtual ~ScoreSource() = default;
  // Scores of MoE layer `moe_layer` for the token at `position` of the current sequence: fills
  // z [E]; fills pregate_next [E] (router of the next MoE layer on this layer's input) and
  // returns true, or returns false when it has no pre-gate for that layer (part 1 is skipped).
  virtual bool scores(int position, int moe_layer, std::span<float> z,
                      std::span<float> pregate_next) = 0;
  // Sigmoid routers: whether weight_scores() can be asked (the engine refuses a source without
  // them for such a model), and the scores the execution weights come from (z without the bias)
  // for the same token and layer.
  virtual bool has_weight_scores() const { return false; }
  virtual void weight_scores(int /*position*/, int /*moe_layer*/, std::span<float> /*out*/) {}
};

}  // namespace steermoe::engine
