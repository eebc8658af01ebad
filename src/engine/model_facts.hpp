// A loaded model's facts in the terms of the policy library and the offload configuration.
#pragma once

#include "model/weights.hpp"
#include "policy/config.hpp"
#include "schedule/offload_config.hpp"

namespace steermoe::engine {

// The router facts of a model (layers = its MoE layers; 0 for a dense model).
policy::RouterSpec router_spec(const model::ModelConfig& config);

// The KV cache positions an engine gets for `requested` (-c): that, or min(trained context,
// 4096) when 0.
int resolve_context(const model::ModelConfig& config, int requested);

// What resolve_offload() checks the options against.
schedule::ModelFacts model_facts(const model::Model& model);

}  // namespace steermoe::engine
