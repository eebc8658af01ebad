#include "engine/routing.hpp"

#include "common/error.hpp"

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
  s.default_window = c.family == model::Family::kDeepseekV3 ? 4 : 8;
  return s;
}

LayerRouting::LayerRouting(const model::ModelConfig& config, const std::string& policy,
                           int cache_slots, const policy::Calibration* calibration)
    : spec_(router_spec(config)), config_(policy::parse_policy(policy)) {
  slots_ = cache_slots > 0 ? cache_slots : spec_.experts;
  policy::validate(config_, spec_, slots_);
  if (calibration != nullptr &&
      (calibration->layers != spec_.layers || calibration->experts != spec_.experts ||
       calibration->top_k != spec_.top_k)) {
    fail("calibration", "shape",
         "expected {} MoE layers x {} experts, top-{} (the model's), found {} x {}, top-{}",
         spec_.layers, spec_.experts, spec_.top_k, calibration->layers, calibration->experts,
         calibration->top_k);
  }
  calibration_ = calibration != nullptr ? *calibration : policy::uninformed_calibration(spec_);
  routers_.reserve(static_cast<size_t>(spec_.layers));
  for (int m = 0; m < spec_.layers; ++m) {
    routers_.push_back(
        std::make_unique<policy::RequestRouter>(spec_, config_, calibration_, slots_));
  }
}

bool LayerRouting::prefetches() const {
  return config_.prefetch_budget > 0 || config_.kind == policy::PolicyKind::kSpec;
}

void LayerRouting::reset() {
  for (auto& r : routers_) r->reset();
}

void LayerRouting::begin_token(int moe_layer, int32_t token) {
  routers_[static_cast<size_t>(moe_layer)]->begin_token(token);
}

void LayerRouting::prefetch(int moe_layer, std::span<const float> pregate) {
  routers_[static_cast<size_t>(moe_layer)]->prefetch(moe_layer, pregate);
}

const policy::Decision& LayerRouting::select(int moe_layer, std::span<const float> z,
                                             std::span<const float> weight_scores) {
  return routers_[static_cast<size_t>(moe_layer)]->select(moe_layer, z, weight_scores);
}

}  // namespace steermoe::engine
