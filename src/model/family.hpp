// A model family: what the forward pass needs to know about a layer's blocks.
#pragma once

#include <cstdint>

#include "model/config.hpp"

namespace steermoe::model {

// The mixer block of a layer (the block sequence of every family is: pre-norm, mixer, residual,
// pre-norm, dense or MoE feed-forward, residual): grouped-query attention (OLMoE, Qwen3, the
// full-attention layers of the hybrids), multi-head latent attention (DeepSeek-V3), or Gated
// DeltaNet (the linear-attention layers of the hybrids).
enum class Mixer : uint8_t { kGqa, kMla, kGatedDeltaNet };
Mixer layer_mixer(const ModelConfig& config, int layer);

}  // namespace steermoe::model
