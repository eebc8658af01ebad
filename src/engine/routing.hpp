// The engine's connection to the policy library. Every MoE layer's experts are chosen by a
// policy::RequestRouter (default policy "exact:evict=lru" with every expert resident), so the
// same code path runs every policy.
//
// Why one RequestRouter per MoE layer: a router keeps one step counter for all layers, but a
// batched prefill routes layer by layer (all prompt tokens of layer l, then of layer l+1). The
// state of layer l only depends on layer l's history (policy contract), so giving each layer its
// own router, advanced once per token, reproduces the token-by-token decisions exactly in both
// orders. Router m is only ever asked about layer m.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "model/config.hpp"
#include "policy/calibration.hpp"
#include "policy/config.hpp"
#include "policy/router.hpp"

namespace steermoe::engine {

// The router facts of a model, for the policy library.
policy::RouterSpec router_spec(const model::ModelConfig& config);

class LayerRouting {
 public:
  // `policy` is a policy string (policy/README.md); cache_slots 0 means all experts resident.
  // `calibration` may be null (uninformed calibration, enough for exact routing).
  LayerRouting(const model::ModelConfig& config, const std::string& policy, int cache_slots,
               const policy::Calibration* calibration = nullptr);
  // Routers hold a reference to calibration_: the object must not move.
  LayerRouting(const LayerRouting&) = delete;
  LayerRouting& operator=(const LayerRouting&) = delete;

  const policy::RouterSpec& spec() const { return spec_; }
  const policy::PolicyConfig& policy() const { return config_; }
  int cache_slots() const { return slots_; }
  // True if the policy inserts experts from pre-gate scores (part 1 of the step).
  bool prefetches() const;

  void reset();
  // Advances MoE layer m's router to the next token (call once per token and MoE layer, in token
  // order, before prefetch/select of that layer for the token).
  void begin_token(int moe_layer, int32_t token);
  void prefetch(int moe_layer, std::span<const float> pregate);
  const policy::Decision& select(int moe_layer, std::span<const float> z,
                                 std::span<const float> weight_scores);

 private:
  policy::RouterSpec spec_;
  policy::PolicyConfig config_;
  policy::Calibration calibration_;
  int slots_ = 0;
  std::vector<std::unique_ptr<policy::RequestRouter>> routers_;  // [moe layers]
};

}  // namespace steermoe::engine
