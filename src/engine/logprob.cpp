#include "engine/logprob.hpp"

#include <algorithm>
#include <cmath>

namespace steermoe::engine {

double log_normalizer(std::span<const float> logits) {
  float max_logit = logits[0];
  for (float v : logits) max_logit = std::max(max_logit, v);
  double sum = 0.0;
  for (float v : logits) sum += std::exp(static_cast<double>(v) - max_logit);
  return std::log(sum) + max_logit;
}

void top_tokens(std::span<const float> logits, int n, std::vector<int32_t>& out) {
  const auto k =
      static_cast<size_t>(std::clamp<int64_t>(n, 0, static_cast<int64_t>(logits.size())));
  out.resize(logits.size());
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<int32_t>(i);
  auto better = [&](int32_t a, int32_t b) {
    const float va = logits[static_cast<size_t>(a)];
    const float vb = logits[static_cast<size_t>(b)];
    return va > vb || (va == vb && a < b);
  };
  std::partial_sort(out.begin(), out.begin() + static_cast<ptrdiff_t>(k), out.end(), better);
  out.resize(k);
}

}  // namespace steermoe::engine
