// Small in-memory router traces for the scheduler's tests and benchmark: per-expert popularity,
// a per-token preference, an AR(1) drift (temporal locality), and a pre-gate that is a noisy
// copy of the next layer's scores (cross-layer predictability). Deterministic for a seed on one
// platform. Not a model of real routing; `steermoe trace-synth` has the documented generator.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "policy/calibration.hpp"
#include "policy/config.hpp"
#include "schedule/simulator.hpp"

namespace steermoe::schedule::testing {

struct SyntheticTrace {
  policy::RouterSpec spec;
  int vocab = 0;
  std::vector<int32_t> tokens;
  std::vector<float> scores, pregate;
  std::vector<int64_t> starts;

  TraceView view() const {
    return {.layers = spec.layers,
            .experts = spec.experts,
            .tokens = tokens,
            .scores = scores,
            .pregate = pregate,
            .sequence_starts = starts};
  }
};

// `model_seed` fixes popularity and token preferences (the "model"); `seed` the text.
inline SyntheticTrace make_trace(int layers, int experts, int top_k, int64_t steps, int sequences,
                                 uint64_t seed, uint64_t model_seed = 7, int vocab = 64) {
  SyntheticTrace t;
  t.spec = {.experts = experts, .top_k = top_k, .layers = layers};
  t.vocab = vocab;
  std::mt19937_64 model_rng(model_seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const size_t cells = static_cast<size_t>(layers) * experts;
  std::vector<float> popularity(cells), preference(static_cast<size_t>(vocab) * cells);
  for (float& x : popularity) x = 1.0f * normal(model_rng);
  for (float& x : preference) x = 0.8f * normal(model_rng);
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> token_dist(0, vocab - 1);
  std::vector<float> drift(cells, 0.0f);
  t.tokens.resize(static_cast<size_t>(steps));
  t.scores.resize(static_cast<size_t>(steps) * cells);
  t.pregate.assign(static_cast<size_t>(steps) * cells, 0.0f);
  for (int s = 0; s < sequences; ++s) t.starts.push_back(steps * s / sequences);
  for (int64_t step = 0; step < steps; ++step) {
    const int32_t token = token_dist(rng);
    t.tokens[static_cast<size_t>(step)] = token;
    for (size_t i = 0; i < cells; ++i) {
      drift[i] = 0.6f * drift[i] + 0.8f * normal(rng);
      t.scores[static_cast<size_t>(step) * cells + i] =
          popularity[i] + preference[static_cast<size_t>(token) * cells + i] + drift[i];
    }
    for (int l = 1; l < layers; ++l) {
      for (int e = 0; e < experts; ++e) {
        const size_t i = static_cast<size_t>(step) * cells + static_cast<size_t>(l) * experts + e;
        t.pregate[i] = 0.8f * t.scores[i] + 0.6f * normal(rng);
      }
    }
  }
  return t;
}

// Calibration from a held-out trace of the same model (exact routing, every step).
inline policy::Calibration calibrate(const SyntheticTrace& held_out) {
  policy::Calibrator calibrator(held_out.spec, held_out.vocab);
  const TraceView v = held_out.view();
  for (int64_t step = 0; step < v.steps(); ++step) {
    for (int l = 0; l < v.layers; ++l)
      calibrator.add(l, v.tokens[static_cast<size_t>(step)], v.score_row(step, l));
    calibrator.end_step();
  }
  return calibrator.finish();
}

}  // namespace steermoe::schedule::testing
