// The shipped trained model (models/steer-olmoe-tiny, HF folder, BF16) against its PyTorch
// reference (float32 compute on the BF16 weights upcast): logits, argmax and routed experts on
// three sequences. Skipped while the model is absent. The BF16-dot-product kernel level rounds
// activations to bf16 (like a bf16 model), so this test runs the f32-activation level that
// matches the reference's arithmetic.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "engine/engine.hpp"
#include "engine/sampler.hpp"

namespace steermoe::engine {
namespace {

namespace fs = std::filesystem;
const fs::path kModel = fs::path(STEERMOE_SOURCE_DIR) / "models" / "steer-olmoe-tiny";

std::vector<float> read_f32(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<float> out(bytes.size() / 4);
  std::memcpy(out.data(), bytes.data(), out.size() * 4);
  return out;
}

class IsaGuard {
 public:
  IsaGuard() : saved_(kernels::active_isa()) {
    for (kernels::Isa isa : {kernels::Isa::kAvx512, kernels::Isa::kAvx2, kernels::Isa::kScalar}) {
      if (kernels::isa_available(isa)) {
        kernels::set_active_isa(isa);
        break;
      }
    }
  }
  ~IsaGuard() { kernels::set_active_isa(saved_); }

 private:
  kernels::Isa saved_;
};

TEST(TinyModel, MatchesPyTorchReference) {
  if (!fs::exists(kModel / "model.safetensors") ||
      !fs::exists(kModel / "reference" / "reference.json")) {
    GTEST_SKIP() << "models/steer-olmoe-tiny not present";
  }
  IsaGuard isa;
  auto model = model::Model::load(kModel);
  std::ifstream in(kModel / "reference" / "reference.json");
  const nlohmann::json ref = nlohmann::json::parse(in);
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
    std::printf("[ tiny     ] %s: %zu tokens, max |logit diff| %.3g\n",
                seq.at("source_doc").get<std::string>().c_str(), tokens.size(), max_diff);
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

}  // namespace
}  // namespace steermoe::engine
