// The model's own selection scores from a row of router logits, computed on the host by every
// compute backend the same way (so that routing is bit-identical whichever backend ran): z (what
// the model ranks by; sigmoid routers add the correction bias) and the scores its execution
// weights come from (softmax: the logits; sigmoid: the unbiased sigmoid). Header-only: the CPU
// and CUDA backends are separate libraries.
#pragma once

#include <cmath>
#include <cstring>
#include <vector>

#include "model/config.hpp"

namespace steermoe::engine {

inline void router_scores(const model::ModelConfig& c, const std::vector<float>& bias,
                          const float* logits, float* z, float* weight_scores) {
  const auto e_count = static_cast<size_t>(c.experts);
  if (c.router == model::RouterScore::kSoftmax) {
    std::memcpy(z, logits, e_count * sizeof(float));
    std::memcpy(weight_scores, logits, e_count * sizeof(float));
    return;
  }
  for (size_t e = 0; e < e_count; ++e) {
    const float s = 1.0f / (1.0f + std::exp(-logits[e]));
    weight_scores[e] = s;
    z[e] = bias.empty() ? s : s + bias[e];
  }
}

}  // namespace steermoe::engine
