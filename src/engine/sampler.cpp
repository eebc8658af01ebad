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

namespace {

void check(bool ok, const char* name, const char* expected, double value) {
  if (!ok) fail("sampler", name, "expected {}, found {}", expected, value);
}

}  // namespace

Sampler::Sampler(int vocab, const SamplerParams& params)
    : params_(params),
      rng_(params.seed),
      order_(static_cast<size_t>(vocab)),
      probs_(static_cast<size_t>(vocab)) {
  const SamplerParams& p = params;
  check(p.temperature >= 0.0f && std::isfinite(p.temperature), "temperature", "a finite value >= 0",
        p.temperature);
  check(p.top_p > 0.0f && p.top_p <= 1.0f, "top_p", "a value in (0, 1]", p.top_p);
  check(p.top_k >= 0, "top_k", "a count >= 0 (0: off)", p.top_k);
  check(p.min_p >= 0.0f && p.min_p <= 1.0f, "min_p", "a value in [0, 1]", p.min_p);
  check(p.repetition_penalty > 0.0f && std::isfinite(p.repetition_penalty), "repetition_penalty",
        "a finite value > 0 (1: off)", p.repetition_penalty);
  check(std::isfinite(p.presence_penalty), "presence_penalty", "a finite value",
        p.presence_penalty);
  check(std::isfinite(p.frequency_penalty), "frequency_penalty", "a finite value",
        p.frequency_penalty);
  check(p.penalty_last_n >= -1, "penalty_last_n", "a count >= -1 (-1: all, 0: none)",
        p.penalty_last_n);
  if (p.penalties()) {
    adjusted_.resize(static_cast<size_t>(vocab));
    counts_.assign(static_cast<size_t>(vocab), 0);
    if (p.penalty_last_n > 0) window_.reserve(static_cast<size_t>(p.penalty_last_n));
  }
}

void Sampler::accept(int32_t token) {
  if (!params_.penalties()) return;
  SM_ASSERT(token >= 0 && static_cast<size_t>(token) < counts_.size());
  const auto cap = static_cast<size_t>(params_.penalty_last_n);
  if (params_.penalty_last_n < 0 || window_.size() < cap) {
    window_.push_back(token);
  } else {
    --counts_[static_cast<size_t>(window_[window_next_])];
    window_[window_next_] = token;
    window_next_ = (window_next_ + 1) % cap;
  }
  ++counts_[static_cast<size_t>(token)];
}

std::span<const float> Sampler::penalized(std::span<const float> logits) {
  if (!params_.penalties() || window_.empty()) return logits;
  std::copy(logits.begin(), logits.end(), adjusted_.begin());
  // Each distinct token once: its count is negated once it is penalized (every token in the
  // window has a positive count before), and restored after.
  for (int32_t t : window_) {
    const auto i = static_cast<size_t>(t);
    const int32_t count = counts_[i];
    if (count <= 0) continue;
    float& l = adjusted_[i];
    if (params_.repetition_penalty != 1.0f) {
      l = l > 0.0f ? l / params_.repetition_penalty : l * params_.repetition_penalty;
    }
    l -= static_cast<float>(count) * params_.frequency_penalty + params_.presence_penalty;
    counts_[i] = -count;
  }
  for (int32_t t : window_) {
    const auto i = static_cast<size_t>(t);
    if (counts_[i] < 0) counts_[i] = -counts_[i];
  }
  return adjusted_;
}

size_t Sampler::keep(std::span<const float> logits, double& kept_mass) {
  const float max_logit = logits[static_cast<size_t>(argmax(logits))];
  for (size_t i = 0; i < logits.size(); ++i) {
    probs_[i] = std::exp((logits[i] - max_logit) / params_.temperature);
  }
  for (size_t i = 0; i < order_.size(); ++i) order_[i] = static_cast<int32_t>(i);
  // Descending probability, ties to the lower id: a total order, so results are reproducible.
  const auto before = [&](int32_t a, int32_t b) {
    const float pa = probs_[static_cast<size_t>(a)], pb = probs_[static_cast<size_t>(b)];
    return pa != pb ? pa > pb : a < b;
  };
  size_t n = order_.size();
  if (params_.top_k > 0 && static_cast<size_t>(params_.top_k) < n) {
    n = static_cast<size_t>(params_.top_k);
    std::partial_sort(order_.begin(), order_.begin() + static_cast<ptrdiff_t>(n), order_.end(),
                      before);
  } else {
    std::sort(order_.begin(), order_.end(), before);
  }
  double mass = 0.0;
  for (size_t i = 0; i < n; ++i) mass += probs_[static_cast<size_t>(order_[i])];
  size_t kept = 0;
  kept_mass = 0.0;
  const double top = probs_[static_cast<size_t>(order_[0])];
  while (kept < n) {
    const double p = probs_[static_cast<size_t>(order_[kept])];
    if (kept > 0 && p < params_.min_p * top) break;
    kept_mass += p;
    ++kept;
    if (kept_mass >= params_.top_p * mass) break;
  }
  return kept;
}

int32_t Sampler::sample(std::span<const float> logits) {
  SM_ASSERT(logits.size() == probs_.size());
  const std::span<const float> l = penalized(logits);
  if (params_.temperature == 0.0f) return argmax(l);
  double kept_mass = 0.0;
  const size_t kept = keep(l, kept_mass);
  std::uniform_real_distribution<double> uniform(0.0, kept_mass);
  const double r = uniform(rng_);
  double acc = 0.0;
  for (size_t i = 0; i < kept; ++i) {
    acc += probs_[static_cast<size_t>(order_[i])];
    if (r < acc) return order_[i];
  }
  return order_[kept - 1];
}

std::vector<std::pair<int32_t, double>> Sampler::distribution(std::span<const float> logits) {
  SM_ASSERT(logits.size() == probs_.size());
  const std::span<const float> l = penalized(logits);
  if (params_.temperature == 0.0f) return {{argmax(l), 1.0}};
  double kept_mass = 0.0;
  const size_t kept = keep(l, kept_mass);
  std::vector<std::pair<int32_t, double>> out;
  for (size_t i = 0; i < kept; ++i) {
    out.emplace_back(order_[i], probs_[static_cast<size_t>(order_[i])] / kept_mass);
  }
  return out;
}

}  // namespace steermoe::engine
