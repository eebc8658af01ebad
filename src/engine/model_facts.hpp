// A loaded model's facts in the terms of the policy library and the offload configuration.
#pragma once

#include "model/weights.hpp"
#include "policy/config.hpp"
#include "schedule/offload_config.hpp"

namespace steermoe::engine {

// The router facts of a model (layers = its MoE layers; 0 for a dense model).
policy::RouterSpec router_spec(const model::ModelConfig& config);

// What resolve_offload() checks the options against.
schedule::ModelFacts model_facts(const model::Model& model);

}  // namespace steermoe::engine
