// The whole forward on the CUDA backend against the CPU engine: the llama.cpp oracle models
// (OLMoE, Qwen3-MoE, DeepSeek-V3 MLA, Moonlight), the small HF models of tests/data/hf_models
// (Qwen3-Next, Qwen3.5, OLMoE clip_qkv, DeepSeek-V3 YaRN, dense Qwen3) and the steer-olmoe-tiny
// model. Logits within
// 1e-3 of the largest |logit| of each token, identical argmax, identical routed experts; and
// bit-identical logits across --max-inflight, injected copy delays, links (emulated host slots,
// the cuda link's device slots) and all-resident experts. Every test skips with the reason when no
// GPU is present.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "../offload_params.hpp"
#include "common/error.hpp"
#include "cuda_test_util.hpp"
#include "engine/cuda_backend_factory.hpp"
#include "engine/engine.hpp"
#include "trace/calibration_file.hpp"

namespace steermoe::cudatest {
namespace {

namespace fs = std::filesystem;
using engine::Engine;
using engine::EngineParams;
using engine::RoutingRecord;

const fs::path kOracle = STEERMOE_ORACLE_DIR;
const fs::path kTiny = fs::path(STEERMOE_SOURCE_DIR) / "models" / "steer-olmoe-tiny";

struct Outcome {
  std::vector<float> logits;  // [tokens][vocab]
  RoutingRecord record;
};

// A prompt of 6 tokens (batched prefill, all logits), then 12 decoded one at a time; twice.
Outcome run(const model::Model& m, EngineParams p) {
  Outcome r;
  p.context = 24;
  p.quiet = true;
  Engine e(m, p);
  e.set_recorder(&r.record);
  const int vocab = m.config().vocab;
  const auto V = static_cast<size_t>(vocab);
  std::vector<int32_t> ids;
  for (int i = 0; i < 18; ++i) ids.push_back((i * 131 + 17) % vocab);
  for (int request = 0; request < 2; ++request) {
    e.reset();
    std::vector<float> prompt_logits(6 * V);
    e.prefill(std::span<const int32_t>(ids.data(), 6), prompt_logits);
    r.logits.insert(r.logits.end(), prompt_logits.begin(), prompt_logits.end());
    for (size_t i = 6; i < ids.size(); ++i) {
      const auto l = e.decode(ids[i]);
      r.logits.insert(r.logits.end(), l.begin(), l.end());
    }
  }
  return r;
}

class CudaForward : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { SM_REQUIRE_GPU(); }
};

// An oracle model's GGUF ("olmoe"), or a folder under tests/data ("hf_models/qwen3_next").
fs::path model_path(const std::string& name) {
  if (name.find('/') != std::string::npos)
    return fs::path(STEERMOE_SOURCE_DIR) / "tests" / "data" / name;
  return kOracle / name / "model.gguf";
}

TEST_P(CudaForward, MatchesTheCpuEngineOnTheOracleModel) {
  const fs::path path = model_path(GetParam());
  const auto model = model::Model::load(path);
  EngineParams p = steermoe::test_support::offload_params(*model, "exact:evict=lru", 0, "resident");
  p.backend = "cpu";
  const Outcome cpu = run(*model, p);
  p.backend = "cuda";
  const Outcome gpu = run(*model, p);
  ASSERT_EQ(cpu.logits.size(), gpu.logits.size());
  const auto V = static_cast<size_t>(model->config().vocab);
  double worst = 0;
  for (size_t t = 0; t * V < cpu.logits.size(); ++t) {
    const auto row = [&](const Outcome& o) {
      return std::span<const float>(o.logits.data() + t * V, V);
    };
    const auto c = row(cpu), g = row(gpu);
    float scale = 0;
    for (float v : c) scale = std::max(scale, std::fabs(v));
    for (size_t i = 0; i < V; ++i) {
      const double err = std::fabs(static_cast<double>(c[i]) - g[i]);
      worst = std::max(worst, err / std::max(scale, 1e-6f));
      ASSERT_LE(err, 1e-3 * scale) << GetParam() << " token " << t << " logit " << i;
    }
    ASSERT_EQ(std::max_element(c.begin(), c.end()) - c.begin(),
              std::max_element(g.begin(), g.end()) - g.begin())
        << GetParam() << " argmax of token " << t;
  }
  EXPECT_EQ(cpu.record.selected, gpu.record.selected) << GetParam() << ": routed experts differ";
  std::printf("[ %s ] max |logit error| / max |logit| = %.3g\n", GetParam().c_str(), worst);
}

INSTANTIATE_TEST_SUITE_P(Oracle, CudaForward,
                         ::testing::Values("olmoe", "qwen3moe", "deepseek2_v3",
                                           "deepseek2_moonlight"));
// The features the shared block sequences brought to the GPU: Gated DeltaNet layers, gated
// attention and shared expert, partial rotary (Qwen3-Next, Qwen3.5), clip_qkv (OLMoE), YaRN
// (DeepSeek-V3), the dense Qwen3.
INSTANTIATE_TEST_SUITE_P(HfModels, CudaForward,
                         ::testing::Values("hf_models/qwen3_next", "hf_models/qwen3_5_moe",
                                           "hf_models/olmoe_clip", "hf_models/deepseek_v3_yarn",
                                           "hf_models/qwen3_dense"),
                         [](const ::testing::TestParamInfo<std::string>& i) {
                           return i.param.substr(i.param.find('/') + 1);
                         });

class CudaTiny : public ::testing::Test {
 protected:
  void SetUp() override {
    SM_REQUIRE_GPU();
    model_ = model::Model::load(kTiny);
    calib_ = std::make_unique<policy::Calibration>(trace::read_calibration(kTiny / "calib.smcal"));
  }
  EngineParams params(const std::string& policy, int cache, const std::string& link) const {
    EngineParams p =
        steermoe::test_support::offload_params(*model_, policy, cache, link, calib_.get());
    p.backend = "cuda";
    return p;
  }
  std::unique_ptr<model::Model> model_;
  std::unique_ptr<policy::Calibration> calib_;
};

TEST_F(CudaTiny, LogitsAreBitIdenticalAcrossInflightDelaysAndSlotStores) {
  const int E = model_->config().experts;
  for (const char* policy : {"exact:evict=lru", "psr:lambda=0.3,n=1", "cacheprior:lambda=0.2"}) {
    SCOPED_TRACE(policy);
    // All experts uploaded (logical cache) is the reference for every offloaded variant.
    const Outcome base = run(*model_, params(policy, E / 2, "resident"));
    struct Variant {
      const char* link;
      int inflight;
      double delay_s;
    };
    for (const Variant v :
         {Variant{"emulated:10,2", 1, 0.0}, Variant{"emulated:10,2", 4, 0.0},
          Variant{"emulated:10,2", 2, 0.002}, Variant{"emulated:10,2", 8, 0.001},
          Variant{"cuda", 1, 0.0}, Variant{"cuda", 4, 0.0}, Variant{"cuda", 2, 0.002}}) {
      SCOPED_TRACE(std::string(v.link) + " max_inflight " + std::to_string(v.inflight) + " delay " +
                   std::to_string(v.delay_s));
      EngineParams p = params(policy, E / 2, v.link);
      p.offload.max_inflight = v.inflight;
      p.test_copy_delay_max_s = v.delay_s;
      p.test_copy_delay_seed = 7;
      const Outcome got = run(*model_, p);
      ASSERT_EQ(got.logits, base.logits);
      ASSERT_EQ(got.record.selected, base.record.selected);
    }
  }
}

TEST_F(CudaTiny, RepeatedRunsAreBitIdentical) {
  const Outcome a = run(*model_, params("exact:evict=lru", 0, "resident"));
  const Outcome b = run(*model_, params("exact:evict=lru", 0, "resident"));
  ASSERT_EQ(a.logits, b.logits);
}

TEST_F(CudaTiny, CudaLinkNeedsTheCudaBackend) {
  EngineParams p = params("exact:evict=lru", model_->config().experts / 2, "cuda");
  p.backend = "cpu";
  try {
    Engine e(*model_, p);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("expected --backend cuda with --link cuda"),
              std::string::npos)
        << e.what();
  }
}

TEST_F(CudaTiny, AnUnknownBackendIsAClearError) {
  EngineParams p = params("exact:evict=lru", 0, "resident");
  p.backend = "tpu";
  try {
    Engine e(*model_, p);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("expected cpu or cuda"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace steermoe::cudatest
