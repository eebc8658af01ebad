// Next-token choice from logits, for `steermoe run` and `steermoe serve` alike: penalties on the
// tokens seen lately, then greedy (temperature 0) or temperature + top-k + top-p + min-p
// sampling with a seeded generator, so a run is reproducible from its seed. Buffers are sized
// at construction; sample() does not allocate.
//
// Order (as vLLM and HF transformers apply them):
//   1. penalties, on the raw logits of tokens among the last `penalty_last_n` accepted ones
//      (prompt and generated; llama.cpp's window): repetition (CTRL: a positive logit is
//      divided by it, a negative one multiplied), then frequency (x count) and presence
//      (x 1) subtracted (OpenAI's definition);
//   2. temperature 0: the largest penalized logit (ties to the lower id); else
//   3. softmax at the temperature, tokens sorted by probability (ties to the lower id);
//   4. top-k: the k most likely; top-p: the shortest prefix whose probability reaches top_p of
//      the top-k mass; min-p: tokens at least min_p x the most likely one's probability
//      (at least one token survives every filter);
//   5. a draw from what is kept, in proportion to probability.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <utility>
#include <vector>

namespace steermoe::engine {

struct SamplerParams {
  float temperature = 0.0f;         // 0: greedy (argmax, ties to the lower id)
  int top_k = 0;                    // keep the k most likely tokens (0: all)
  float top_p = 1.0f;               // nucleus: keep the smallest set reaching this probability
  float min_p = 0.0f;               // drop tokens below min_p x the top token's probability
  float repetition_penalty = 1.0f;  // 1: off; > 1 discourages repeats
  float presence_penalty = 0.0f;    // subtracted once from the logit of a token seen lately
  float frequency_penalty = 0.0f;   // subtracted per occurrence
  int penalty_last_n = 64;          // tokens the penalties look back on (-1: all, 0: none)
  uint64_t seed = 0;

  bool penalties() const {
    return penalty_last_n != 0 &&
           (repetition_penalty != 1.0f || presence_penalty != 0.0f || frequency_penalty != 0.0f);
  }
};

class Sampler {
 public:
  // Throws steermoe::Error naming the parameter when one is out of range.
  Sampler(int vocab, const SamplerParams& params);
  // A token of the sequence (prompt or generated), for the penalties. sample() does not accept
  // its own choice: the caller accepts what it keeps.
  void accept(int32_t token);
  int32_t sample(std::span<const float> logits);
  // The distribution sample() draws from for `logits` (with the tokens accepted so far), most
  // likely first, probabilities summing to 1; temperature 0 gives the one greedy token.
  std::vector<std::pair<int32_t, double>> distribution(std::span<const float> logits);

 private:
  // The logits after the penalties (`logits` itself when there are none).
  std::span<const float> penalized(std::span<const float> logits);
  // Fills probs_/order_ and returns how many of order_ are kept, and their probability mass.
  size_t keep(std::span<const float> logits, double& kept_mass);

  SamplerParams params_;
  std::mt19937_64 rng_;
  std::vector<int32_t> order_;
  std::vector<float> probs_;
  std::vector<float> adjusted_;  // penalized logits
  std::vector<int32_t> window_;  // the last penalty_last_n accepted tokens (a ring)
  size_t window_next_ = 0;       // where the next one goes once the ring is full
  std::vector<int32_t> counts_;  // per token: occurrences in the window
};

// Index of the largest value (ties to the lower index).
int32_t argmax(std::span<const float> values);

}  // namespace steermoe::engine
