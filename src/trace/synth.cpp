#include "trace/synth.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "common/error.hpp"
#include "common/progress.hpp"

namespace steermoe::trace {
namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Uniform in (0, 1] from 53 random bits.
double unit_from_bits(uint64_t bits) {
  return (static_cast<double>(bits >> 11) + 1.0) * 0x1.0p-53;
}

double gaussian_from_bits(uint64_t a, uint64_t b) {
  return std::sqrt(-2.0 * std::log(unit_from_bits(a))) * std::cos(2.0 * M_PI * unit_from_bits(b));
}

// A counter-based Gaussian: the same (key...) always gives the same value, so per-token
// preferences need no table of vocab * L * E floats.
double hashed_gaussian(uint64_t seed, uint64_t a, uint64_t b, uint64_t c) {
  const uint64_t h = splitmix64(splitmix64(splitmix64(splitmix64(seed) ^ a) ^ b) ^ c);
  return gaussian_from_bits(h, splitmix64(h ^ 0x5851f42d4c957f2dULL));
}

// xoshiro256** for the sequential draws (token ids, dynamics, pre-gate noise).
class Rng {
 public:
  explicit Rng(uint64_t seed) {
    for (uint64_t& word : state_) word = seed = splitmix64(seed);
  }
  uint64_t next() {
    const uint64_t result = rotl(state_[1] * 5, 7) * 9;
    const uint64_t t = state_[1] << 17;
    state_[2] ^= state_[0];
    state_[3] ^= state_[1];
    state_[1] ^= state_[2];
    state_[0] ^= state_[3];
    state_[2] ^= t;
    state_[3] = rotl(state_[3], 45);
    return result;
  }
  double uniform() { return unit_from_bits(next()); }
  double gaussian() {
    const uint64_t a = next();
    return gaussian_from_bits(a, next());
  }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t state_[4];
};

enum Stream : uint64_t { kPopularity = 1, kPreference = 2, kBias = 3 };

float sigmoid(double x) {
  return static_cast<float>(1.0 / (1.0 + std::exp(-x)));
}

}  // namespace

TraceMeta synth_shape_meta(std::string_view shape) {
  TraceMeta meta;
  if (shape == "olmoe") {
    meta.layers = 16;
    meta.experts = 64;
    meta.top_k = 8;
    meta.router = "softmax";
    meta.window = 8;
    meta.vocab = 50304;
    meta.expert_bytes = 12'582'912;
    for (int l = 0; l < meta.layers; ++l) meta.moe_layer_ids.push_back(l);
  } else if (shape == "moonlight") {
    meta.layers = 26;
    meta.experts = 64;
    meta.top_k = 6;
    meta.router = "sigmoid";
    meta.window = 4;
    meta.vocab = 163840;
    meta.norm_topk_prob = true;
    meta.routed_scaling_factor = 2.446f;
    meta.expert_bytes = 17'301'504;
    for (int l = 0; l < meta.layers; ++l) meta.moe_layer_ids.push_back(l + 1);  // layer 0 is dense
  } else if (shape == "qwen36") {
    meta.layers = 40;
    meta.experts = 256;
    meta.top_k = 8;
    meta.router = "softmax";
    meta.window = 4;
    meta.vocab = 248320;
    meta.norm_topk_prob = true;
    meta.expert_bytes = 6'291'456;
    for (int l = 0; l < meta.layers; ++l) meta.moe_layer_ids.push_back(l);
  } else {
    fail("trace-synth", "--shape", "expected olmoe, moonlight or qwen36, found \"{}\"", shape);
  }
  meta.model = "synthetic-" + std::string(shape);
  return meta;
}

void synthesize_trace(const SynthParams& p, const std::filesystem::path& dir) {
  TraceMeta meta = synth_shape_meta(p.shape);
  const char* where = "trace-synth";
  if (p.tokens < 1 || p.tokens > (int64_t{1} << 32))
    fail(where, "--tokens", "expected 1..2^32, found {}", p.tokens);
  if (p.sequences < 1 || p.sequences > p.tokens)
    fail(where, "--sequences", "expected 1..tokens = {}, found {}", p.tokens, p.sequences);
  if (!(p.locality >= 0.0 && p.locality < 1.0))
    fail(where, "--locality", "expected a value in [0, 1), found {}", p.locality);
  if (!(p.predictability >= 0.0 && p.predictability <= 1.0))
    fail(where, "--predictability", "expected a value in [0, 1], found {}", p.predictability);
  if (!(p.token_dependence >= 0.0 && p.token_dependence <= 100.0))
    fail(where, "--token-dependence", "expected a value in [0, 100], found {}", p.token_dependence);
  if (!(p.popularity >= 0.0 && p.popularity <= 100.0))
    fail(where, "--popularity", "expected a value in [0, 100], found {}", p.popularity);
  if (!(p.zipf >= 0.0 && p.zipf <= 10.0))
    fail(where, "--zipf", "expected a value in [0, 10], found {}", p.zipf);
  if (p.vocab < 0) fail(where, "--vocab", "expected a positive vocabulary size, found {}", p.vocab);
  if (p.vocab > 0) meta.vocab = p.vocab;
  meta.extra["synthetic"] = {{"generator", "steermoe trace-synth v1"},
                             {"shape", p.shape},
                             {"tokens", p.tokens},
                             {"sequences", p.sequences},
                             {"locality", p.locality},
                             {"predictability", p.predictability},
                             {"token_dependence", p.token_dependence},
                             {"popularity", p.popularity},
                             {"zipf", p.zipf},
                             {"seed", p.seed},
                             {"model_seed", p.model_seed}};

  const int L = meta.layers, E = meta.experts;
  const size_t row = static_cast<size_t>(L) * static_cast<size_t>(E);
  const bool sigmoid_router = meta.router == "sigmoid";

  // The "model": fixed popularity per (layer, expert) and, for sigmoid routers, a correction bias.
  std::vector<double> popularity(row), bias(row, 0.0);
  for (int l = 0; l < L; ++l) {
    for (int e = 0; e < E; ++e) {
      const size_t i = static_cast<size_t>(l) * E + e;
      popularity[i] =
          p.popularity * hashed_gaussian(p.model_seed, kPopularity, static_cast<uint64_t>(l),
                                         static_cast<uint64_t>(e));
      if (sigmoid_router)
        bias[i] = 0.1 * hashed_gaussian(p.model_seed, kBias, static_cast<uint64_t>(l),
                                        static_cast<uint64_t>(e));
    }
  }
  // Token frequencies: Zipf over ranks; rank r is token id r (ids carry no meaning here).
  std::vector<double> cumulative(static_cast<size_t>(meta.vocab));
  double total = 0;
  for (size_t r = 0; r < cumulative.size(); ++r)
    cumulative[r] = total += std::pow(static_cast<double>(r + 1), -p.zipf);

  // Standard deviation of a logit across experts, so the pre-gate noise has the logits' scale.
  const double logit_sd =
      std::sqrt(p.popularity * p.popularity + p.token_dependence * p.token_dependence + 1.0);
  const double innovation = std::sqrt(1.0 - p.locality * p.locality);
  const double pregate_noise = std::sqrt(1.0 - p.predictability * p.predictability) * logit_sd;

  Rng rng(splitmix64(p.seed) ^ 0x243f6a8885a308d3ULL);
  TraceWriter writer(dir, meta, sigmoid_router);
  std::vector<double> dynamics(row), logits(row);
  std::vector<float> scores(row), pregate(row), weights(sigmoid_router ? row : 0);
  const int64_t base_length = p.tokens / p.sequences, longer = p.tokens % p.sequences;
  Progress progress("trace-synth", p.tokens, "steps");
  for (int64_t s = 0; s < p.sequences; ++s) {
    writer.begin_sequence();
    const int64_t length = base_length + (s < longer ? 1 : 0);
    for (int64_t i = 0; i < length; ++i) {
      const double u = rng.uniform() * total;
      const auto token = static_cast<int32_t>(std::min<size_t>(
          static_cast<size_t>(std::lower_bound(cumulative.begin(), cumulative.end(), u) -
                              cumulative.begin()),
          cumulative.size() - 1));
      for (size_t j = 0; j < row; ++j) {
        // Stationary AR(1) with unit variance: fresh at a sequence start, then correlated by X.
        dynamics[j] =
            i == 0 ? rng.gaussian() : p.locality * dynamics[j] + innovation * rng.gaussian();
        const uint64_t l = j / static_cast<size_t>(E), e = j % static_cast<size_t>(E);
        const double preference =
            p.token_dependence == 0.0
                ? 0.0
                : p.token_dependence * hashed_gaussian(p.model_seed, kPreference,
                                                       static_cast<uint64_t>(token) * 4096 + l, e);
        logits[j] = popularity[j] + preference + dynamics[j];
      }
      for (size_t j = 0; j < row; ++j) {
        const bool first_layer = j < static_cast<size_t>(E);
        const double pre =
            first_layer ? 0.0 : p.predictability * logits[j] + pregate_noise * rng.gaussian();
        if (sigmoid_router) {
          weights[j] = sigmoid(logits[j]);
          scores[j] = weights[j] + static_cast<float>(bias[j]);
          pregate[j] = first_layer ? 0.0f : sigmoid(pre) + static_cast<float>(bias[j]);
        } else {
          scores[j] = static_cast<float>(logits[j]);
          pregate[j] = static_cast<float>(pre);
        }
      }
      writer.append_step(token, scores, pregate, weights);
      progress.advance();  // throws Interrupted after Ctrl-C; the staged folder is removed
    }
  }
  progress.finish();
  writer.close();
}

}  // namespace steermoe::trace
