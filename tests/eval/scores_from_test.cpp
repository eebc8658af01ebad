// bench --scores-from on a sigmoid-router model (DeepSeek-V3): the trace's selection scores (with
// the bias) route, its weights_scores weight the experts. Supplying a model's own trace of the
// same tokens must then give the logits the model computes by itself, bit for bit (the weights
// taken from the biased scores would not).
#include "eval/scores_from.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "../cli_runner.hpp"
#include "engine/engine.hpp"
#include "model/weights.hpp"
#include "trace/trace.hpp"

namespace steermoe::eval {
namespace {

namespace fs = std::filesystem;

TEST(ScoresFrom, SigmoidTraceOfTheSameTokensGivesTheModelsOwnLogits) {
  const fs::path model_path =
      fs::path(STEERMOE_SOURCE_DIR) / "tests" / "data" / "oracle" / "deepseek2_v3" / "model.gguf";
  const fs::path dir = fs::temp_directory_path() / "steermoe_scores_from_sigmoid";
  fs::remove_all(dir);
  const auto traced = test_support::run_cli(
      "trace -q -m " + model_path.string() + " -f " +
      (fs::path(STEERMOE_SOURCE_DIR) / "data" / "text" / "eval.txt").string() +
      " --window 16 --max-tokens 32 -o " + dir.string());
  ASSERT_EQ(traced.status, 0) << traced.output;
  const auto model = model::Model::load(model_path);
  const trace::Trace trace = trace::Trace::open(dir);
  ASSERT_TRUE(trace.has_weights_scores());
  TraceScores source(trace, model->config().moe_layer_count());
  const std::vector<std::vector<int32_t>> windows = source.windows(1, 16);
  ASSERT_EQ(windows.size(), 1u);
  source.begin_window(0);
  engine::Engine supplied(*model, {.context = 16, .score_source = &source});
  engine::Engine own(*model, {.context = 16});
  for (int32_t token : windows[0]) {
    const auto a = supplied.decode(token);
    const auto b = own.decode(token);
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
  }
  // bench takes it (it had refused every sigmoid-router model), and refuses a trace whose
  // router is not the model's.
  const fs::path calib = dir / "calib.smcal";
  ASSERT_EQ(test_support::run_cli("calibrate -q --trace " + dir.string() + " -o " + calib.string() +
                                  " > /dev/null")
                .status,
            0);
  const std::string bench = "bench -m " + model_path.string() + " --scores-from " + dir.string() +
                            " --calib " + calib.string() +
                            " --policy psr:lambda=0.3,n=1 --residency 0.5 --windows 1 "
                            "--window-len 16 --rounds 1 --no-floor";
  const auto ran = test_support::run_cli(bench);
  EXPECT_EQ(ran.status, 0) << ran.output;
  {
    std::ifstream in(dir / "meta.json");
    nlohmann::json meta = nlohmann::json::parse(in);
    meta["router"] = "softmax";
    std::ofstream(dir / "meta.json") << meta.dump();
  }
  const auto mismatch = test_support::run_cli(bench);
  EXPECT_EQ(mismatch.status, 1) << mismatch.output;
  EXPECT_NE(mismatch.output.find("router: expected the model's sigmoid router, found softmax"),
            std::string::npos)
      << mismatch.output;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace steermoe::eval
