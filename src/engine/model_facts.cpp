#include "engine/model_facts.hpp"

#include <algorithm>

#include "model/family_def.hpp"

namespace steermoe::engine {

policy::RouterSpec router_spec(const model::ModelConfig& c) {
  policy::RouterSpec s;
  s.experts = c.experts;
  s.top_k = c.top_k;
  s.layers = c.moe_layer_count();
  s.mode = c.router == model::RouterScore::kSigmoid ? policy::ScoreMode::kSigmoid
                                                    : policy::ScoreMode::kSoftmax;
  s.n_group = c.n_group;
  s.topk_group = c.topk_group;
  s.norm_topk_prob = c.norm_topk_prob;
  s.routed_scaling_factor = c.routed_scaling_factor;
  s.default_window = model::family_def(c.family).pregate_window;
  return s;
}

int resolve_context(const model::ModelConfig& config, int requested) {
  return requested > 0 ? requested : std::min(config.max_positions, 4096);
}

schedule::ModelFacts model_facts(const model::Model& model) {
  return {.spec = router_spec(model.config()), .name = model.path().string()};
}

}  // namespace steermoe::engine
