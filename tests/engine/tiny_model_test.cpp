// The shipped trained models (models/steer-olmoe-tiny, models/steer-olmoe-small and the dense
// drafter models/steer-drafter-small; HF folders, BF16) against their PyTorch references
// (float32 compute on the BF16 weights upcast): logits, argmax and routed experts on the
// reference sequences; and the pre-gate scores (router l on the MoE input of layer l-1) against
// the same model's PyTorch computation of them (tools/train/pregate_reference.py). Skipped while
// a model is absent. The BF16-dot-product kernel level rounds activations to bf16 (like a bf16
// model), so these tests run the f32-activation level that matches the reference's arithmetic.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <set>

#include "../f32_file.hpp"
#include "../isa_guard.hpp"
#include "../json_test_util.hpp"
#include "../pregate_check.hpp"
#include "common/error.hpp"
#include "engine/engine.hpp"
#include "engine/kv_cache.hpp"
#include "engine/sampler.hpp"

namespace steermoe::engine {
namespace {

namespace fs = std::filesystem;
fs::path model_dir(const std::string& name) {
  return fs::path(STEERMOE_SOURCE_DIR) / "models" / name;
}

using test_support::read_f32;

class ShippedModel : public ::testing::TestWithParam<std::string> {};

TEST_P(ShippedModel, MatchesPyTorchReference) {
  const fs::path kModel = model_dir(GetParam());
  if (!fs::exists(kModel / "model.safetensors") ||
      !fs::exists(kModel / "reference" / "reference.json")) {
    GTEST_SKIP() << kModel << " not present";
  }
  test_support::F32ActivationKernels f32_kernels;
  auto model = model::Model::load(kModel);
  std::ifstream in(kModel / "reference" / "reference.json");
  const nlohmann::json ref = steermoe::test_support::parse_json_stream(in);
  const auto V = static_cast<size_t>(model->config().vocab);
  const auto K = static_cast<size_t>(model->config().top_k);
  const size_t L = static_cast<size_t>(model->config().moe_layer_count());
  for (const auto& seq : ref.at("sequences")) {
    const auto tokens = seq.at("tokens").get<std::vector<int32_t>>();
    const std::vector<float> want =
        read_f32(kModel / "reference" / seq.at("logits_file").get<std::string>());
    ASSERT_EQ(want.size(), tokens.size() * V);
    RoutingRecord record;
    Engine engine(*model, {.context = static_cast<int>(tokens.size())});
    engine.set_recorder(&record);
    float max_diff = 0.0f;
    for (size_t p = 0; p < tokens.size(); ++p) {
      const auto got = engine.decode(tokens[p]);
      std::span<const float> row(&want[p * V], V);
      for (size_t i = 0; i < V; ++i) max_diff = std::max(max_diff, std::fabs(got[i] - row[i]));
      EXPECT_EQ(argmax(got), argmax(row)) << "position " << p;
    }
    EXPECT_LE(max_diff, 1e-4f);
    std::printf("[ %s ] %s: %zu tokens, max |logit diff| %.3g\n", GetParam().c_str() + 6,
                seq.at("source_doc").get<std::string>().c_str(), tokens.size(), max_diff);
    if (L == 0) continue;  // a dense model routes nothing
    const auto& topk = seq.at("topk_experts");
    const auto& gaps = seq.at("gap_k_k1");
    int compared = 0;
    for (size_t l = 0; l < L; ++l) {
      for (size_t p = 0; p < tokens.size(); ++p) {
        if (gaps[l][p].get<double>() < 1e-4) continue;  // a near tie: either set is right
        const auto experts = topk[l][p].get<std::vector<int>>();
        std::set<int> want_set(experts.begin(), experts.end());
        std::set<int> got_set;
        for (size_t i = 0; i < K; ++i) got_set.insert(record.selected[(p * L + l) * K + i]);
        EXPECT_EQ(got_set, want_set) << "layer " << l << " position " << p;
        ++compared;
      }
    }
    EXPECT_GT(compared, static_cast<int>(L * tokens.size() * 9 / 10));
  }
}

// RoutingRecord::pregate row l must be router l applied to the MoE input (post-attention-norm
// hidden state) of layer l-1, row 0 zero. Wrong router or wrong hidden state: O(1) errors.
class ShippedMoeModel : public ::testing::TestWithParam<std::string> {};

TEST_P(ShippedMoeModel, PregateMatchesPyTorchReference) {
  const fs::path kModel = model_dir(GetParam());
  const fs::path ref_file = kModel / "reference" / "pregate.json";
  if (!fs::exists(kModel / "model.safetensors") || !fs::exists(ref_file)) {
    GTEST_SKIP() << ref_file << " not present";
  }
  test_support::F32ActivationKernels f32_kernels;
  auto model = model::Model::load(kModel);
  std::ifstream in(ref_file);
  const nlohmann::json ref = steermoe::test_support::parse_json_stream(in);
  const auto E = static_cast<size_t>(model->config().experts);
  const auto L = static_cast<size_t>(model->config().moe_layer_count());
  ASSERT_EQ(ref.at("layers").get<size_t>(), L);
  ASSERT_EQ(ref.at("experts").get<size_t>(), E);
  constexpr size_t kWindow = 8;  // the default pre-gate window W
  for (const auto& seq : ref.at("sequences")) {
    const auto tokens = seq.at("tokens").get<std::vector<int32_t>>();
    const std::vector<float> want =
        read_f32(kModel / "reference" / seq.at("pregate_file").get<std::string>());
    ASSERT_EQ(want.size(), tokens.size() * L * E);
    float scale = 0.0f;
    for (float v : want) scale = std::max(scale, std::fabs(v));
    ASSERT_GT(scale, 0.5f);
    // The pre-gate scores are router products over activations that agree with PyTorch as
    // closely as the logits do (measured 1e-5 at |logit| ~ 10 in the test above): 1e-5 of the
    // largest |score| (~7e-5; measured error ~4e-6). A wrong router or input is off by O(1).
    const float tol = 1e-5f * scale;
    for (bool batched : {false, true}) {
      RoutingRecord record;
      Engine engine(*model, {.context = static_cast<int>(tokens.size())});
      engine.set_recorder(&record);
      if (batched) {
        engine.prefill(tokens);
      } else {
        for (int32_t t : tokens) engine.decode(t);
      }
      ASSERT_EQ(record.pregate.size(), want.size());
      const test_support::PregateFigures f = test_support::expect_pregate_matches(
          record.pregate, want, tokens.size(), L, E, kWindow, tol);
      std::printf("[ %s ] %s %s: max |pregate diff| %.3g (tolerance %.3g), %d rankings\n",
                  GetParam().c_str() + 6, seq.at("source_doc").get<std::string>().c_str(),
                  batched ? "batched" : "incremental", f.max_diff, tol, f.ranked);
    }
  }
}

// A long sequence's KV pages go back to the system between sequences (serve after each request)
// and the next sequences compute the same bits as on a fresh engine.
TEST(KvRelease, PagesGoBackAndBitsStay) {
  KvCache kv(2, 4096, 64, 64);
  for (int p = 0; p < 3000; ++p)
    for (int l = 0; l < 2; ++l) {
      kv.k(l, p)[0] = 1.0f;
      kv.v(l, p)[63] = 1.0f;
    }
  const size_t per_position = 2 * 2 * 64 * sizeof(float);
  EXPECT_GE(kv.resident_bytes(), 3000 * per_position);
  kv.release_from(1024);
  EXPECT_LE(kv.resident_bytes(), 1024 * per_position + 4 * 4096);
  EXPECT_GE(kv.resident_bytes(), 1024 * per_position);
  EXPECT_EQ(kv.k(0, 1023)[0], 1.0f);  // kept
  EXPECT_EQ(kv.k(1, 2999)[0], 0.0f);  // released: zero again

  const auto model =
      model::Model::load(fs::path(STEERMOE_SOURCE_DIR) / "models" / "steer-olmoe-small");
  std::vector<int32_t> long_text(200), short_text(12);
  for (size_t i = 0; i < long_text.size(); ++i)
    long_text[i] = static_cast<int32_t>((i * 37) % 4000);
  for (size_t i = 0; i < short_text.size(); ++i)
    short_text[i] = static_cast<int32_t>((i * 11 + 5) % 4000);
  Engine reused(*model, {.context = 256});
  reused.prefill(long_text);
  reused.release_kv_beyond(8);  // mid-sequence: the current positions stay
  const auto next = reused.decode(7);
  const std::vector<float> after_release(next.begin(), next.end());
  {
    Engine whole(*model, {.context = 256});
    whole.prefill(long_text);
    const auto expected = whole.decode(7);
    ASSERT_EQ(expected.size(), after_release.size());
    EXPECT_EQ(std::memcmp(expected.data(), after_release.data(), expected.size() * sizeof(float)),
              0);
  }
  // A server's request answered: the pages past 4 go at once, and nothing runs before reset().
  const size_t before = reused.kv_resident_bytes();
  reused.end_sequence(4);
  EXPECT_LT(reused.kv_resident_bytes(), before / 4);  // at once, not at the next request
  EXPECT_THROW(reused.decode(7), Error);
  reused.reset();
  const auto a = reused.prefill(short_text);
  Engine fresh(*model, {.context = 256});
  const auto b = fresh.prefill(short_text);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
}

std::string param_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string n = info.param.substr(6);  // after "steer-"
  std::replace(n.begin(), n.end(), '-', '_');
  return n;
}

INSTANTIATE_TEST_SUITE_P(Models, ShippedModel,
                         ::testing::Values("steer-olmoe-tiny", "steer-olmoe-small",
                                           "steer-drafter-small"),
                         param_name);
// the drafter is dense: no router, no pre-gate
INSTANTIATE_TEST_SUITE_P(Models, ShippedMoeModel,
                         ::testing::Values("steer-olmoe-tiny", "steer-olmoe-small"), param_name);

}  // namespace
}  // namespace steermoe::engine
