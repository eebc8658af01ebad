#include "model/family.hpp"

namespace steermoe::model {

Mixer layer_mixer(const ModelConfig& c, int layer) {
  if (c.is_linear(layer)) return Mixer::kGatedDeltaNet;
  return c.family == Family::kDeepseekV3 ? Mixer::kMla : Mixer::kGqa;
}

}  // namespace steermoe::model
