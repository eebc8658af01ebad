// Teacher-forced perplexity over non-overlapping windows (each window a fresh sequence,
// processed as one batched prompt): the computation behind `steermoe perplexity`.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/engine.hpp"

namespace steermoe::eval {

// -log softmax(logits)[target], in double (vocabulary summed in index order).
double token_nll(std::span<const float> logits, int32_t target);

struct PerplexityOptions {
  int window = 512;     // tokens per window including the BOS
  int max_windows = 0;  // 0: all
  int bos = -1;         // token prepended to every window (never a target); -1: none
};

struct WindowNll {
  size_t begin = 0;    // index of the window's first text token
  int64_t tokens = 0;  // scored tokens
  double nll = 0.0;    // mean over the window's scored tokens
};

struct PerplexityResult {
  std::vector<WindowNll> windows;
  double total_nll = 0.0;  // sum over every scored token
  int64_t scored = 0;
  double seconds = 0.0;
  double mean_nll() const { return total_nll / static_cast<double>(scored); }
};

// `engine` must have context >= options.window; it is reset before every window.
PerplexityResult perplexity(engine::Engine& engine, int vocab, std::span<const int32_t> ids,
                            const PerplexityOptions& options);

}  // namespace steermoe::eval
