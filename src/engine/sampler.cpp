#include "engine/sampler.hpp"

#include <algorithm>
#include <cmath>

#include "common/error.hpp"

namespace steermoe::engine {

int32_t argmax(std::span<const float> values) {
  SM_ASSERT(!values.empty());
  size_t best = 0;
  for (size_t i = 1; i < values.size(); ++i) {
    if (values[i] > values[best]) best = i;
  }
  return static_cast<int32_t>(best);
}

Sampler::Sampler(int vocab, const SamplerParams& params)
    : params_(params),
      rng_(params.seed),
      order_(static_cast<size_t>(vocab)),
      probs_(static_cast<size_t>(vocab)) {
  if (!(params.temperature >= 0.0f && std::isfinite(params.temperature))) {
    fail("sampler", "temperature", "expected a finite value >= 0, found {}", params.temperature);
  }
  if (!(params.top_p > 0.0f && params.top_p <= 1.0f)) {
    fail("sampler", "top_p", "expected a value in (0, 1], found {}", params.top_p);
  }
}

int32_t Sampler::sample(std::span<const float> logits) {
  SM_ASSERT(logits.size() == probs_.size());
  if (params_.temperature == 0.0f) return argmax(logits);
  const float max_logit = logits[static_cast<size_t>(argmax(logits))];
  double sum = 0.0;
  for (size_t i = 0; i < logits.size(); ++i) {
    probs_[i] = std::exp((logits[i] - max_logit) / params_.temperature);
    sum += probs_[i];
  }
  for (size_t i = 0; i < order_.size(); ++i) order_[i] = static_cast<int32_t>(i);
  // Descending probability, ties to the lower id: a total order, so results are reproducible.
  std::sort(order_.begin(), order_.end(), [&](int32_t a, int32_t b) {
    const float pa = probs_[static_cast<size_t>(a)], pb = probs_[static_cast<size_t>(b)];
    return pa != pb ? pa > pb : a < b;
  });
  size_t keep = 0;
  double kept_mass = 0.0;
  while (keep < order_.size()) {
    kept_mass += probs_[static_cast<size_t>(order_[keep])];
    ++keep;
    if (kept_mass >= params_.top_p * sum) break;
  }
  std::uniform_real_distribution<double> uniform(0.0, kept_mass);
  const double r = uniform(rng_);
  double acc = 0.0;
  for (size_t i = 0; i < keep; ++i) {
    acc += probs_[static_cast<size_t>(order_[i])];
    if (r < acc) return order_[i];
  }
  return order_[keep - 1];
}

}  // namespace steermoe::engine
