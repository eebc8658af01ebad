// Config variants as transformers 5.x writes them (num_local_experts, rope_parameters, YaRN,
// clip_qkv, Qwen3.5's text_config, layer_types) and the new families' bad-input errors: each
// names the file, the field and what was expected. Missing Gated DeltaNet tensors are refused
// with the tensor's name.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "../error_text.hpp"
#include "../json_test_util.hpp"
#include "common/error.hpp"
#include "model/config.hpp"
#include "model/gguf.hpp"
#include "model/hf_config.hpp"
#include "model/weights.hpp"
#include "model/weights_layout.hpp"

namespace steermoe::model {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::HasSubstr;

const fs::path kData = fs::path(STEERMOE_SOURCE_DIR) / "tests" / "data" / "hf_models";

json config_of(const std::string& model) {
  std::ifstream in(kData / model / "config.json");
  return steermoe::test_support::parse_json_stream(in);
}

std::string error_of(const json& j) {
  return test_support::error_text([&] { parse_hf_config(steermoe::dump_json(j), "cfg.json"); });
}

TEST(ConfigVariants, Transformers5Spellings) {
  const ModelConfig q = load_hf_config(kData / "qwen3moe_v5" / "config.json");
  EXPECT_EQ(q.experts, 16);  // num_local_experts
  EXPECT_FLOAT_EQ(q.rope_theta, 1e6f);  // rope_parameters.rope_theta
  EXPECT_EQ(q.moe_layer, (std::vector<uint8_t>{1, 0, 1}));
  json j = config_of("qwen3moe_v5");
  j.erase("num_local_experts");
  EXPECT_THAT(error_of(j), HasSubstr("cfg.json: num_experts or num_local_experts: missing"));
  j["num_experts"] = 16;
  EXPECT_EQ(parse_hf_config(steermoe::dump_json(j), "cfg.json").experts, 16);

  const ModelConfig o = load_hf_config(kData / "olmoe_clip" / "config.json");
  EXPECT_FLOAT_EQ(o.clip_qkv, 0.6f);
  EXPECT_TRUE(o.tied_embeddings);
  json oj = config_of("olmoe_clip");
  oj["clip_qkv"] = -1.0;
  EXPECT_THAT(error_of(oj), HasSubstr("clip_qkv: expected null or a positive value"));
}

TEST(ConfigVariants, DeepseekYarn) {
  const ModelConfig c = load_hf_config(kData / "deepseek_v3_yarn" / "config.json");
  EXPECT_EQ(c.rope_scaling.kind, RopeScalingKind::kYarn);
  EXPECT_FLOAT_EQ(c.rope_scaling.factor, 4.0f);
  EXPECT_EQ(c.rope_scaling.original_max_positions, 64);
  EXPECT_FLOAT_EQ(c.rope_scaling.mscale, 0.707f);
  EXPECT_FLOAT_EQ(c.rope_scaling.mscale_all_dim, 1.0f);
  EXPECT_EQ(c.experts, 16);
  // transformers: attention_factor = get_mscale(4, 0.707) / get_mscale(4, 1); softmax scale =
  // 24^-0.5 * get_mscale(4, 1)^2.
  const double m1 = 0.1 * std::log(4.0) + 1.0, m707 = 0.1 * 0.707 * std::log(4.0) + 1.0;
  EXPECT_NEAR(c.rope_attention_factor(), m707 / m1, 1e-6);
  EXPECT_NEAR(c.attention_scale(), std::pow(24.0, -0.5) * m1 * m1, 1e-6);
  // Frequencies: above the correction range they are the plain ones, below divided by factor.
  const std::vector<float> inv = c.rope_inv_freq();
  ASSERT_EQ(inv.size(), 4u);
  EXPECT_FLOAT_EQ(inv[0], 1.0f);  // extrapolated (high frequency)
  EXPECT_NEAR(inv[3], 1.0 / std::pow(10000.0, 6.0 / 8.0) / 4.0, 1e-9);  // interpolated
  // The written config reads back to the same scaling (v4 rope_scaling spelling).
  const ModelConfig back = parse_hf_config(hf_config_json(c, "float32"), "written");
  EXPECT_EQ(back.summary(), c.summary());
  EXPECT_EQ(back.rope_inv_freq(), inv);
  EXPECT_EQ(back.rope_attention_factor(), c.rope_attention_factor());

  json j = config_of("deepseek_v3_yarn");
  j["rope_parameters"]["factor"] = 0.5;
  EXPECT_THAT(error_of(j), HasSubstr("cfg.json: rope_parameters.factor: expected a finite value in [1"));
  j = config_of("deepseek_v3_yarn");
  j["rope_parameters"]["rope_type"] = "longrope";
  EXPECT_THAT(error_of(j), HasSubstr("rope_parameters.rope_type: expected \"default\" or \"yarn\""));
  j = config_of("deepseek_v3_yarn");
  j["rope_parameters"] = json{{"full_attention", json{{"rope_type", "default"}}}};
  EXPECT_THAT(error_of(j), HasSubstr("per-layer-type RoPE is not supported"));
}

TEST(ConfigVariants, HybridFamilies) {
  const ModelConfig n = load_hf_config(kData / "qwen3_next" / "config.json");
  EXPECT_EQ(n.family, Family::kQwen3Next);
  EXPECT_EQ(n.linear_layer, (std::vector<uint8_t>{1, 1, 1, 0}));
  EXPECT_EQ(n.rotary_dim(), 4);
  EXPECT_EQ(n.linear.conv_kernel, 4);
  EXPECT_EQ(n.linear.k_heads, 2);
  EXPECT_EQ(n.linear.v_heads, 4);
  EXPECT_TRUE(n.attn_output_gate);
  EXPECT_TRUE(n.shared_expert_gate);
  EXPECT_EQ(n.shared_ffn, 32);

  const ModelConfig q = load_hf_config(kData / "qwen3_5_moe" / "config.json");
  EXPECT_EQ(q.family, Family::kQwen35Moe);
  EXPECT_EQ(q.linear_layer, (std::vector<uint8_t>{1, 0, 1, 0}));  // explicit layer_types
  EXPECT_FLOAT_EQ(q.rope_theta, 1e7f);
  EXPECT_TRUE(q.norm_topk_prob);
  for (const ModelConfig* c : {&n, &q}) {
    const ModelConfig back = parse_hf_config(hf_config_json(*c, "float32"), "written");
    EXPECT_EQ(back.summary(), c->summary());
    EXPECT_EQ(back.linear_layer, c->linear_layer);
  }
  // full_attention_interval instead of layer_types.
  json j = config_of("qwen3_next");
  j.erase("layer_types");
  j["full_attention_interval"] = 2;
  EXPECT_EQ(parse_hf_config(steermoe::dump_json(j), "cfg.json").linear_layer,
            (std::vector<uint8_t>{1, 0, 1, 0}));
}

TEST(ConfigVariants, HybridBadInput) {
  const json next = config_of("qwen3_next");
  const json q35 = config_of("qwen3_5_moe");
  json j = next;
  j["layer_types"] = json::array({"linear_attention", "full_attention"});
  EXPECT_THAT(error_of(j), HasSubstr("cfg.json: layer_types: expected a list of 4 entries"));
  j = next;
  j["layer_types"][2] = "sliding_attention";
  EXPECT_THAT(error_of(j), HasSubstr("layer_types[2]: expected \"linear_attention\" or \"full_attention\""));
  j = next;
  j["linear_num_value_heads"] = 3;
  EXPECT_THAT(error_of(j), HasSubstr("linear_num_value_heads: expected a multiple of linear_num_key_heads (2)"));
  j = next;
  j["num_key_value_heads"] = 3;
  EXPECT_THAT(error_of(j), HasSubstr("num_key_value_heads: expected a divisor"));
  j = next;
  j["linear_conv_kernel_dim"] = 0;
  EXPECT_THAT(error_of(j), HasSubstr("linear_conv_kernel_dim: expected an integer in [1, 64], found 0"));
  j = next;
  j["linear_conv_kernel_dim"] = 100000;
  EXPECT_THAT(error_of(j), HasSubstr("linear_conv_kernel_dim: expected an integer in [1, 64]"));
  j = next;
  j["rope_parameters"]["partial_rotary_factor"] = 0.0;
  EXPECT_THAT(error_of(j), HasSubstr("partial_rotary_factor: expected a value in (0, 1]"));
  j = next;
  j["rope_parameters"]["partial_rotary_factor"] = 0.1;  // 1.6 rotated dims
  EXPECT_THAT(error_of(j), HasSubstr("rotary dims"));
  j = q35;
  j["text_config"]["model_type"] = "qwen3_vl_text";
  EXPECT_THAT(error_of(j), HasSubstr("text_config.model_type: expected \"qwen3_5_moe_text\""));
  j = q35;
  j["text_config"]["model_type"] = 6;  // found by fuzz_config_json: was an uncaught JSON exception
  EXPECT_THAT(error_of(j), HasSubstr("cfg.json (text_config): model_type: expected a string, found 6"));
  j = q35;
  j.erase("text_config");
  EXPECT_THAT(error_of(j), HasSubstr("cfg.json: text_config: expected an object"));
  j = q35;
  j["text_config"]["linear_key_head_dim"] = 5000;
  EXPECT_THAT(error_of(j), HasSubstr("linear_key_head_dim: expected an integer in [1, 4096]"));
  j = config_of("olmoe_clip");
  j["layer_types"] = json::array({"linear_attention", "full_attention"});
  EXPECT_EQ(error_of(j), "");  // not a hybrid family: the field means nothing to OLMoE
}

TEST(ConfigVariants, RealQwen36Shape) {
  const ModelConfig c = shape_config("qwen3.6-35b-a3b");
  EXPECT_EQ(c.family, Family::kQwen35Moe);
  EXPECT_EQ(c.layers, 40);
  EXPECT_EQ(c.linear_layer_count(), 30);
  EXPECT_EQ(c.experts, 256);
  EXPECT_EQ(c.top_k, 8);
  EXPECT_EQ(c.rotary_dim(), 64);
  EXPECT_EQ(c.linear.conv_dim(), 8192);
  // One routed expert in BF16: 3 x 2048 x 512 x 2 bytes (architectures.md).
  EXPECT_EQ(3ull * static_cast<uint64_t>(c.hidden) * static_cast<uint64_t>(c.expert_ffn) * 2,
            6291456ull);
  EXPECT_EQ(shape_config("Qwen3.6-35B-A3B").summary(), c.summary());
  const ModelConfig n = shape_config("Qwen3-Next-80B-A3B");
  EXPECT_EQ(n.experts, 512);
  EXPECT_EQ(n.top_k, 10);
  EXPECT_EQ(n.linear_layer_count(), 36);
}

int run_cli(const std::string& args) {
  const std::string cmd = std::string(STEERMOE_BINARY) + " " + args + " > /dev/null 2>&1";
  const int st = std::system(cmd.c_str());
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

std::string load_error(const fs::path& p) {
  return test_support::error_text([&] { Model::load(p); });
}

// The qwen3_next GGUF twin rewritten without one tensor.
fs::path without(const fs::path& src, const std::string& drop) {
  const GgufFile f = GgufFile::open(src);
  const fs::path out = fs::path(testing::TempDir()) / ("drop_" + std::to_string(std::hash<std::string>{}(drop)) + ".gguf");
  GgufWriter w(out);
  for (const auto& [k, v] : f.metadata()) {
    if (k != "general.alignment") w.add(k, v);
  }
  for (const GgufTensorInfo& info : f.tensor_infos()) {
    if (info.name == drop) continue;
    const TensorView t = f.tensor(info.name);
    w.add_tensor(t.name, t.dtype, t.shape, t.bytes());
  }
  w.finish();
  return out;
}

TEST(ConfigVariants, MissingLinearAttentionTensorsAreNamed) {
  for (const std::string model : {"qwen3_next", "qwen3_5_moe"}) {
    SCOPED_TRACE(model);
    const fs::path gguf = fs::path(testing::TempDir()) / ("miss_" + model + ".gguf");
    ASSERT_EQ(run_cli("convert -m " + (kData / model).string() + " -o " + gguf.string()), 0);
    ASSERT_EQ(load_error(gguf), "");
    for (const std::string t : {"blk.0.ssm_a", "blk.0.ssm_conv1d.weight", "blk.0.attn_qkv.weight",
                                "blk.0.ssm_dt.bias", "blk.0.ssm_out.weight",
                                "blk.0.ffn_gate_inp_shexp.weight"}) {
      EXPECT_THAT(load_error(without(gguf, t)), HasSubstr("tensor '" + t + "': missing")) << t;
    }
    const std::string ba = model == "qwen3_next" ? "blk.0.ssm_beta_alpha.weight" : "blk.0.ssm_alpha.weight";
    EXPECT_THAT(load_error(without(gguf, ba)), HasSubstr("tensor '" + ba + "': missing"));
  }
}

}  // namespace
}  // namespace steermoe::model
