// Next-token choice from logits: greedy (temperature 0) or temperature + nucleus (top-p)
// sampling with a seeded generator, so a run is reproducible from its seed. Buffers are sized at
// construction; sample() does not allocate.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace steermoe::engine {

struct SamplerParams {
  float temperature = 0.0f;  // 0: greedy (argmax, ties to the lower id)
  float top_p = 1.0f;        // keep the smallest set of tokens whose probability reaches top_p
  uint64_t seed = 0;
};

class Sampler {
 public:
  Sampler(int vocab, const SamplerParams& params);
  int32_t sample(std::span<const float> logits);

 private:
  SamplerParams params_;
  std::mt19937_64 rng_;
  std::vector<int32_t> order_;
  std::vector<float> probs_;
};

// Index of the largest value (ties to the lower index).
int32_t argmax(std::span<const float> values);

}  // namespace steermoe::engine
