// Teacher-forced log-softmax of logits, in double: the one computation behind `steermoe
// perplexity`, the server's echo + logprobs and every score that must agree with them bit for bit.
//
//   log_normalizer(logits)  = log(sum_j exp(logits[j] - max)) + max
//   token_nll(logits, t)    = log_normalizer(logits) - logits[t]
//   token_logprob(logits,t) = -token_nll(logits, t)
//
// The sum runs over the vocabulary in index order (fixed reduction order). Given the same
// normalizer, token_logprob of any token equals -(normalizer - logits[t]) exactly, so the
// logprob of a chosen token and its entry among the top alternatives are the identical float.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace steermoe::engine {

double log_normalizer(std::span<const float> logits);

inline double token_nll(double normalizer, std::span<const float> logits, int32_t target) {
  return normalizer - static_cast<double>(logits[static_cast<size_t>(target)]);
}
inline double token_nll(std::span<const float> logits, int32_t target) {
  return token_nll(log_normalizer(logits), logits, target);
}
inline double token_logprob(double normalizer, std::span<const float> logits, int32_t target) {
  return -token_nll(normalizer, logits, target);
}
inline double token_logprob(std::span<const float> logits, int32_t target) {
  return -token_nll(logits, target);
}

// The n most likely token ids, most likely first (ties to the lower id). n is capped at the
// vocabulary size. `out` is resized to the result.
void top_tokens(std::span<const float> logits, int n, std::vector<int32_t>& out);

}  // namespace steermoe::engine
