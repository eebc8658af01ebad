// Routing runs through the policy library: under a cache-aware policy with a small cache the
// executed experts differ from the exact top-K, and the batched prefill (layer-major) makes the
// very decisions of the token-by-token loop (one router per MoE layer).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "../offload_params.hpp"
#include "engine/engine.hpp"

namespace steermoe::engine {
namespace {

namespace fs = std::filesystem;
const fs::path kOracle = fs::path(STEERMOE_ORACLE_DIR);

struct Recorded {
  std::vector<float> logits;
  RoutingRecord record;
};

Recorded run(const model::Model& m, const std::string& policy, int cache, bool batched) {
  Recorded r;
  EngineParams params = test_support::offload_params(m, policy, cache);
  params.context = 40;
  params.max_batch = 16;
  Engine e(m, params);
  e.set_recorder(&r.record);
  std::vector<int32_t> ids;
  for (int i = 0; i < 40; ++i) ids.push_back((i * 53 + 7) % m.config().vocab);
  const auto V = static_cast<size_t>(m.config().vocab);
  r.logits.resize(ids.size() * V);
  if (batched) {
    e.prefill(ids, r.logits);  // 3 batches of up to 16 tokens
  } else {
    for (size_t i = 0; i < ids.size(); ++i) {
      auto l = e.decode(ids[i]);
      std::copy(l.begin(), l.end(), r.logits.begin() + static_cast<ptrdiff_t>(i * V));
    }
  }
  return r;
}

TEST(PolicyRouting, BatchedPrefillMakesTheTokenByTokenDecisions) {
  for (const char* m : {"olmoe", "deepseek2_v3"}) {
    SCOPED_TRACE(m);
    auto model = model::Model::load(kOracle / m / "model.gguf");
    const std::string policy =
        "psr:lambda=0.5,n=1,range=running";  // running range: no calibration needed
    const Recorded a = run(*model, policy, 6, false);
    const Recorded b = run(*model, policy, 6, true);
    EXPECT_EQ(a.record.selected, b.record.selected);
    float max_diff = 0.0f;
    for (size_t i = 0; i < a.logits.size(); ++i)
      max_diff = std::max(max_diff, std::fabs(a.logits[i] - b.logits[i]));
    EXPECT_LE(max_diff, 1e-5f);

    // The policy is really in effect: some executed sets differ from exact routing.
    const Recorded exact = run(*model, "exact", 0, false);
    EXPECT_NE(exact.record.selected, a.record.selected);
    // Scores are recorded before the policy acts: the first MoE layer of the first token has not
    // seen any policy decision yet, so its scores equal the exact run's.
    const auto e_count = static_cast<ptrdiff_t>(exact.record.experts);
    EXPECT_TRUE(std::equal(exact.record.scores.begin(), exact.record.scores.begin() + e_count,
                           a.record.scores.begin()));
  }
}

TEST(PolicyRouting, PregateRowsAreTheNextRouterOnThePreviousMoeInput) {
  auto model = model::Model::load(kOracle / "qwen3moe" / "model.gguf");
  const Recorded r = run(*model, "exact", 0, false);
  const size_t L = static_cast<size_t>(r.record.moe_layers),
               E = static_cast<size_t>(r.record.experts);
  for (size_t t = 0; t < r.record.steps(); ++t) {
    for (size_t e = 0; e < E; ++e)
      EXPECT_EQ(r.record.pregate[(t * L) * E + e], 0.0f);  // row 0 unused
    float diff = 0.0f;
    for (size_t e = 0; e < E; ++e) diff += std::fabs(r.record.pregate[(t * L + 1) * E + e]);
    EXPECT_GT(diff, 0.0f);
  }
}

}  // namespace
}  // namespace steermoe::engine
