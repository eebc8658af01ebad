// Synthetic router traces at the shapes of real models (`steermoe trace-synth`), with knobs for
// the three properties routing policies exploit: temporal locality, cross-layer predictability
// of the pre-gate and per-token preference. The generative model is documented in README.md
// ("Synthetic traces"); the output is deterministic for (params, seed, model_seed) on one
// platform (it uses its own generator and libm's log/cos/sqrt/exp).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include "trace/trace.hpp"

namespace steermoe::trace {

struct SynthParams {
  std::string shape = "olmoe";    // olmoe | moonlight | qwen36
  int64_t tokens = 256;           // total steps T
  int64_t sequences = 4;          // S sequences of about T/S steps
  double locality = 0.6;          // X in [0, 1): AR(1) coefficient of the per-expert dynamics
  double predictability = 0.8;    // Y in [0, 1]: correlation of pre-gate row l with scores row l
  double token_dependence = 1.0;  // Z >= 0: scale of the per-token expert preference
  double popularity = 1.0;        // scale of the fixed per-(layer, expert) popularity
  double zipf = 1.1;              // exponent of the token frequency law
  int vocab = 0;                  // 0 = the real model's vocabulary
  uint64_t seed = 1;              // the "text": token draws and dynamics
  uint64_t model_seed = 1;        // the "model": popularity, token preferences, correction bias
};

// The meta.json of a shape (layers, experts, top_k, router, window, vocab, expert_bytes ...).
// Throws for an unknown shape.
TraceMeta synth_shape_meta(std::string_view shape);

// Writes a trace folder (sigmoid shapes also get weights_scores.npy). Throws on bad parameters.
void synthesize_trace(const SynthParams& params, const std::filesystem::path& dir);

}  // namespace steermoe::trace
