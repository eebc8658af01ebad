// --gdn-prefill chunked (EngineParams::gdn_prefill) on the hybrid families: a prompt's logits at
// every position are within a tolerance of the default token-by-token prefill's, and decoding
// after it continues from the state it left (logits within the same tolerance, the same greedy
// tokens). With the default the batched prefill equals token-by-token decoding bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "../offload_params.hpp"
#include "common/error.hpp"
#include "engine/engine.hpp"
#include "model/weights.hpp"

namespace steermoe::engine {
namespace {

namespace fs = std::filesystem;
const fs::path kData = fs::path(STEERMOE_SOURCE_DIR) / "tests" / "data" / "hf_models";

struct PrefillRun {
  std::vector<float> prompt_logits;  // [prompt][vocab]
  std::vector<float> decode_logits;  // [decoded][vocab]
  std::vector<int32_t> decoded;      // greedy tokens after the prompt
};

// `prompt` through prefill() (batches of max_batch tokens), then `decode` greedy tokens.
PrefillRun run(const model::Model& m, DeltaRulePrefill prefill, int threads,
               const std::vector<int32_t>& prompt, int decode) {
  EngineParams p = test_support::offload_params(m, "exact:evict=lru", 0);
  p.context = 256;
  p.threads = threads;
  p.gdn_prefill = prefill;
  Engine e(m, p);
  const auto vocab = static_cast<size_t>(m.config().vocab);
  PrefillRun r;
  r.prompt_logits.resize(prompt.size() * vocab);
  std::span<const float> last = e.prefill(prompt, r.prompt_logits);
  for (int i = 0; i < decode; ++i) {
    const auto next =
        static_cast<int32_t>(std::max_element(last.begin(), last.end()) - last.begin());
    r.decoded.push_back(next);
    last = e.decode(next);
    r.decode_logits.insert(r.decode_logits.end(), last.begin(), last.end());
  }
  return r;
}

// max |a - b| / (1 + max |b|) over one position's logits, the worst position.
double worst_rel(const std::vector<float>& a, const std::vector<float>& b, size_t vocab) {
  double worst = 0.0;
  for (size_t p0 = 0; p0 < b.size(); p0 += vocab) {
    double scale = 0.0, diff = 0.0;
    for (size_t i = p0; i < p0 + vocab; ++i) {
      scale = std::max(scale, std::fabs(static_cast<double>(b[i])));
      diff = std::max(diff, std::fabs(static_cast<double>(a[i]) - b[i]));
    }
    worst = std::max(worst, std::isnan(diff) ? INFINITY : diff / (1.0 + scale));
  }
  return worst;
}

class GdnPrefill : public ::testing::TestWithParam<std::string> {};

TEST_P(GdnPrefill, ChunkedPrefillLogitsAndDecodeFollowTheRecurrence) {
  const auto m = model::Model::load(kData / GetParam());
  const auto vocab = static_cast<size_t>(m->config().vocab);
  ASSERT_GT(m->config().linear_layer_count(), 0);
  // 150 prompt tokens: prefill batches of 64, 64, 22, so chunks of 32 restart at each batch and
  // the last batch ends in a partial chunk.
  std::mt19937 rng(5);
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(vocab) - 1);
  std::vector<int32_t> prompt(150);
  for (int32_t& t : prompt) t = token(rng);
  const int decode = 6;
  const PrefillRun recurrent = run(*m, DeltaRulePrefill::kRecurrent, 1, prompt, decode);
  const PrefillRun chunked = run(*m, DeltaRulePrefill::kChunked, 1, prompt, decode);
  // The option is in effect: the chunked form rounds differently.
  EXPECT_NE(chunked.prompt_logits, recurrent.prompt_logits);
  // Bit-identical at another thread count (heads split over the threads, each whole on one).
  const PrefillRun chunked2 = run(*m, DeltaRulePrefill::kChunked, 2, prompt, decode);
  EXPECT_EQ(chunked2.prompt_logits, chunked.prompt_logits);
  EXPECT_EQ(chunked2.decode_logits, chunked.decode_logits);
  // The delta rule differs by ~1e-6 relative (the kernels' bound is 1e-5); two Gated DeltaNet
  // layers, attention, MoE and the head carry that into the logits, and routing may flip an
  // expert only when two router scores tie within it (not at these random weights). Measured
  // ~4e-6 relative to the logits' scale (both small hybrid models); the bound is 1e-4.
  const double tol = 1e-4;
  const double e_prompt = worst_rel(chunked.prompt_logits, recurrent.prompt_logits, vocab);
  const double e_decode = worst_rel(chunked.decode_logits, recurrent.decode_logits, vocab);
  std::printf("[ chunked ] %s logits vs recurrent: prompt %.2g, decode %.2g\n", GetParam().c_str(),
              e_prompt, e_decode);
  EXPECT_LE(e_prompt, tol);
  EXPECT_LE(e_decode, tol);
  EXPECT_EQ(chunked.decoded, recurrent.decoded);
}

// The default prefill (batched, recurrent) gives token-by-token decoding's logits bit for bit.
TEST_P(GdnPrefill, RecurrentPrefillEqualsDecodingTokenByToken) {
  const auto m = model::Model::load(kData / GetParam());
  const auto vocab = static_cast<size_t>(m->config().vocab);
  std::vector<int32_t> prompt(70);
  for (size_t i = 0; i < prompt.size(); ++i)
    prompt[i] = static_cast<int32_t>((i * 37 + 11) % vocab);
  const PrefillRun batched = run(*m, DeltaRulePrefill::kRecurrent, 1, prompt, 0);
  EngineParams p = test_support::offload_params(*m, "exact:evict=lru", 0);
  p.context = 256;
  Engine e(*m, p);
  std::vector<float> tokenwise;
  for (int32_t t : prompt) {
    const std::span<const float> l = e.decode(t);
    tokenwise.insert(tokenwise.end(), l.begin(), l.end());
  }
  EXPECT_EQ(batched.prompt_logits, tokenwise);
}

INSTANTIATE_TEST_SUITE_P(Models, GdnPrefill, ::testing::Values("qwen3_next", "qwen3_5_moe"));

// The chunked form is a CPU kernel: asking the CUDA backend for it is an error that says so.
TEST(GdnPrefillOption, CudaBackendRejectsChunked) {
  const auto m = model::Model::load(kData / "qwen3_5_moe");
  EngineParams p = test_support::offload_params(*m, "exact:evict=lru", 0);
  p.context = 32;
  p.backend = "cuda";
  p.gdn_prefill = DeltaRulePrefill::kChunked;
  try {
    Engine e(*m, p);
    FAIL() << "expected an error";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("--gdn-prefill"), std::string::npos) << err.what();
  }
}

}  // namespace
}  // namespace steermoe::engine
