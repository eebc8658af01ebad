// config.json parsing: the oracle configs, v4 vs v5 styles, GGUF metadata agreeing with the HF
// twin, and rejection of bad files with file, field and expectation in the message.
#include "model/config.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "../error_text.hpp"
#include "../json_test_util.hpp"
#include "common/error.hpp"
#include "model/gguf.hpp"
#include "model/hf_config.hpp"

namespace steermoe::model {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::HasSubstr;

const fs::path kOracle = fs::path(STEERMOE_ORACLE_DIR);

json oracle_json(const std::string& model) {
  std::ifstream in(kOracle / model / "hf" / "config.json");
  return steermoe::test_support::parse_json_stream(in);
}

std::string error_of(const json& j) {
  return test_support::error_text([&] { parse_hf_config(steermoe::dump_json(j), "cfg.json"); });
}

std::string parse_error_text(const std::string& text) {
  return test_support::error_text([&] { parse_hf_config(text, "cfg.json"); });
}

TEST(HfConfig, ReadsOracleConfigs) {
  const ModelConfig olmoe = load_hf_config(kOracle / "olmoe" / "hf" / "config.json");
  EXPECT_EQ(olmoe.family, Family::kOlmoe);
  EXPECT_EQ(olmoe.qk_norm, QkNorm::kWholeProjection);
  EXPECT_EQ(olmoe.experts, 16);
  EXPECT_EQ(olmoe.top_k, 4);
  EXPECT_FALSE(olmoe.norm_topk_prob);
  EXPECT_EQ(olmoe.head_dim, 16);

  const ModelConfig qwen = load_hf_config(kOracle / "qwen3moe" / "hf" / "config.json");
  EXPECT_EQ(qwen.family, Family::kQwen3Moe);
  EXPECT_EQ(qwen.qk_norm, QkNorm::kPerHead);
  EXPECT_EQ(qwen.kv_heads, 2);
  EXPECT_EQ(qwen.head_dim, 32);
  EXPECT_TRUE(qwen.norm_topk_prob);
  EXPECT_FLOAT_EQ(qwen.rope_theta, 1e6f);

  const ModelConfig v3 = load_hf_config(kOracle / "deepseek2_v3" / "hf" / "config.json");
  EXPECT_EQ(v3.family, Family::kDeepseekV3);
  EXPECT_EQ(v3.mla.q_lora_rank, 32);
  EXPECT_EQ(v3.n_group, 4);
  EXPECT_EQ(v3.topk_group, 2);
  EXPECT_EQ(v3.moe_layer, (std::vector<uint8_t>{0, 1, 1, 1}));
  EXPECT_EQ(v3.shared_ffn, 32);
  EXPECT_EQ(v3.router, RouterScore::kSigmoid);
  EXPECT_TRUE(v3.correction_bias);
  EXPECT_EQ(v3.rope, RopeKind::kInterleaved);

  const ModelConfig moon = load_hf_config(kOracle / "deepseek2_moonlight" / "hf" / "config.json");
  EXPECT_EQ(moon.mla.q_lora_rank, 0);
  EXPECT_EQ(moon.shared_ffn, 64);
  EXPECT_FLOAT_EQ(moon.routed_scaling_factor, 2.446f);
}

TEST(HfConfig, TransformersV5StyleEqualsV4Style) {
  const ModelConfig v4 = load_hf_config(kOracle / "olmoe" / "hf" / "config.json");
  const ModelConfig v5 = load_hf_config(kOracle / "olmoe" / "hf_fused" / "config.json");
  EXPECT_EQ(v4.rope_theta, v5.rope_theta);
  EXPECT_EQ(v4.summary(), v5.summary());
}

TEST(HfConfig, GgufMetadataAgreesWithHfTwin) {
  for (const char* m : {"olmoe", "qwen3moe", "deepseek2_v3", "deepseek2_moonlight"}) {
    SCOPED_TRACE(m);
    const ModelConfig hf = load_hf_config(kOracle / m / "hf" / "config.json");
    const ModelConfig gg = config_from_gguf(GgufFile::open(kOracle / m / "model.gguf"));
    EXPECT_EQ(hf.summary(), gg.summary());
    EXPECT_EQ(hf.moe_layer, gg.moe_layer);
    EXPECT_EQ(hf.q_head_dim(), gg.q_head_dim());
    EXPECT_EQ(hf.rope, gg.rope);
    EXPECT_NEAR(hf.rms_eps, gg.rms_eps, 1e-12);
    EXPECT_NEAR(hf.routed_scaling_factor, gg.routed_scaling_factor, 1e-6);
    EXPECT_EQ(hf.correction_bias, gg.correction_bias);
  }
}

TEST(HfConfig, WrittenConfigReadsBack) {
  for (const char* m : {"olmoe", "qwen3moe", "deepseek2_v3", "deepseek2_moonlight"}) {
    SCOPED_TRACE(m);
    const ModelConfig c = load_hf_config(kOracle / m / "hf" / "config.json");
    const ModelConfig back = parse_hf_config(hf_config_json(c, "float32"), "written");
    EXPECT_EQ(c.summary(), back.summary());
    EXPECT_EQ(c.moe_layer, back.moe_layer);
    EXPECT_EQ(c.bos_token, back.bos_token);
  }
}

TEST(HfConfig, RejectsBadFilesNamingFileFieldAndExpectation) {
  json j = oracle_json("qwen3moe");
  EXPECT_THAT(error_of(steermoe::parse_json_or_throw("[1,2]")),
              HasSubstr("cfg.json: json: expected a JSON object"));
  EXPECT_THAT(parse_error_text("{not json"), HasSubstr("expected a valid JSON document"));

  json bad = j;
  bad["model_type"] = "llama";
  EXPECT_THAT(error_of(bad), HasSubstr("cfg.json: model_type: expected"));
  bad = j;
  bad.erase("hidden_size");
  EXPECT_THAT(error_of(bad), HasSubstr("cfg.json: hidden_size: missing"));
  bad = j;
  bad["num_hidden_layers"] = 1025;
  EXPECT_THAT(error_of(bad), HasSubstr("num_hidden_layers: expected an integer in [1, 1024]"));
  bad = j;
  bad["num_experts"] = 5000;
  EXPECT_THAT(error_of(bad), HasSubstr("num_experts: expected an integer in [1, 4096]"));
  bad = j;
  bad["num_experts_per_tok"] = 17;
  EXPECT_THAT(error_of(bad), HasSubstr("num_experts_per_tok"));
  bad = j;
  bad["num_key_value_heads"] = 3;
  EXPECT_THAT(error_of(bad), HasSubstr("num_key_value_heads: expected a divisor"));
  bad = j;
  bad["hidden_size"] = "64";
  EXPECT_THAT(error_of(bad), HasSubstr("hidden_size: expected an integer"));
  bad = j;
  bad["hidden_size"] = 64.5;
  EXPECT_THAT(error_of(bad), HasSubstr("hidden_size: expected an integer"));
  bad = j;
  bad["rms_norm_eps"] = -1.0;
  EXPECT_THAT(error_of(bad), HasSubstr("rms_norm_eps"));
  bad = j;
  bad["rope_scaling"] = json{{"type", "linear"}, {"factor", 2.0}};
  EXPECT_THAT(error_of(bad),
              HasSubstr("rope_scaling.rope_type: expected \"default\" or \"yarn\", found \"linear\""));
  bad = j;
  bad["mlp_only_layers"] = json::array({7});
  EXPECT_THAT(error_of(bad), HasSubstr("mlp_only_layers: expected an integer in [0, 2]"));

  json ds = oracle_json("deepseek2_v3");
  bad = ds;
  bad["n_group"] = 3;
  EXPECT_THAT(error_of(bad), HasSubstr("n_group: expected a divisor"));
  bad = ds;
  bad["scoring_func"] = "relu";
  EXPECT_THAT(error_of(bad), HasSubstr("scoring_func: expected"));
  bad = ds;
  bad["first_k_dense_replace"] = 4;
  EXPECT_THAT(error_of(bad), HasSubstr("expected at least one MoE layer"));
}

TEST(HfConfig, MissingFileIsAnError) {
  EXPECT_THROW(load_hf_config("/nonexistent/config.json"), Error);
}

}  // namespace
}  // namespace steermoe::model
