// The engine's pre-gate scores against an independent numpy recomputation on two oracle models
// (tests/data/pregate, made by tools/reference/oracle_pregate.py from the GGUFs; its forward
// passes are checked there against llama.cpp's logits and routing). Row m of
// RoutingRecord::pregate must be the router of MoE layer m applied to the MoE input of MoE layer
// m-1, as selection scores (docs/policy-contract.md, "pre-gate ranking"): OLMoE (softmax router)
// and DeepSeek-V3 (dense layer 0, sigmoid router + correction bias). The wrong router, the wrong
// layer's bias or the wrong hidden state moves the scores by far more than the tolerance.
// Checked for the GGUF and the HF twin, one token at a time and as a batched prompt.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "../f32_file.hpp"
#include "../json_test_util.hpp"
#include "../pregate_check.hpp"
#include "engine/engine.hpp"

namespace steermoe::engine {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

const fs::path kOracle = fs::path(STEERMOE_ORACLE_DIR);
const fs::path kReference = fs::path(STEERMOE_SOURCE_DIR) / "tests" / "data" / "pregate";

// The scores are dot products over activations that agree with the float64 reference to ~1e-6
// (the logits do: 8e-7 and 1.8e-6, oracle README). 1e-5 of the largest |score| is ~50x the
// measured error (2e-7 to 5e-7) and far below what a wrong router, bias or input changes.
constexpr double kRelTolerance = 1e-5;

struct PregateCase {
  std::string model;    // folder under the oracle and name of the reference
  std::string variant;  // "model.gguf" or "hf"
  bool batched;
  size_t window;  // the model's default pre-gate window W (4 for DeepSeek-style models)
};

void PrintTo(const PregateCase& c, std::ostream* os) {
  *os << c.model << "/" << c.variant << (c.batched ? " batched" : " incremental");
}

class OraclePregate : public testing::TestWithParam<PregateCase> {};

TEST_P(OraclePregate, MatchesNumpyRecomputation) {
  const PregateCase& c = GetParam();
  std::ifstream in(kReference / (c.model + ".json"));
  ASSERT_TRUE(in.good()) << kReference / (c.model + ".json");
  const Json ref = steermoe::test_support::parse_json_stream(in);
  const auto tokens = ref.at("tokens").get<std::vector<int32_t>>();
  const auto L = ref.at("moe_layers").get<size_t>();
  const auto E = ref.at("experts").get<size_t>();
  const std::vector<float> want =
      test_support::read_f32(kReference / ref.at("pregate_file").get<std::string>());
  ASSERT_EQ(want.size(), tokens.size() * L * E);
  float scale = 0.0f;
  for (float v : want) scale = std::max(scale, std::fabs(v));
  ASSERT_GT(scale, 0.5f);  // the reference is not a degenerate all-zero file
  const auto tol = static_cast<float>(kRelTolerance * scale);

  auto model = model::Model::load(kOracle / c.model / c.variant);
  ASSERT_EQ(static_cast<size_t>(model->config().moe_layer_count()), L);
  ASSERT_EQ(static_cast<size_t>(model->config().experts), E);
  RoutingRecord record;
  Engine engine(*model, {.context = 64});
  engine.set_recorder(&record);
  if (c.batched) {
    engine.prefill(tokens);
  } else {
    for (int32_t t : tokens) engine.decode(t);
  }
  ASSERT_EQ(record.pregate.size(), want.size());

  const size_t W = std::min(c.window, E - 1);
  const test_support::PregateFigures f =
      test_support::expect_pregate_matches(record.pregate, want, tokens.size(), L, E, W, tol);
  std::printf("[ pregate  ] %s %s %s: max |pregate diff| %.3g (tolerance %.3g), %d rankings\n",
              c.model.c_str(), c.variant.c_str(), c.batched ? "batched" : "incremental", f.max_diff,
              tol, f.ranked);
}

std::vector<PregateCase> all_cases() {
  std::vector<PregateCase> cases;
  for (const auto& [model, window] : {std::pair<const char*, size_t>{"olmoe", 8},
                                      std::pair<const char*, size_t>{"deepseek2_v3", 4}}) {
    for (const char* variant : {"model.gguf", "hf"}) {
      for (bool batched : {false, true}) cases.push_back({model, variant, batched, window});
    }
  }
  return cases;
}

std::string case_name(const testing::TestParamInfo<PregateCase>& p) {
  return p.param.model + (p.param.variant == "hf" ? "_hf" : "_gguf") +
         (p.param.batched ? "_batched" : "_incremental");
}

INSTANTIATE_TEST_SUITE_P(Oracle, OraclePregate, testing::ValuesIn(all_cases()), case_name);

}  // namespace
}  // namespace steermoe::engine
