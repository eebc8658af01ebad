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
#include <set>
#include <variant>

#include "../error_text.hpp"
#include "../json_test_util.hpp"
#include "common/error.hpp"
#include "kernels/kernels.hpp"
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
    for (const std::string t :
         {"blk.0.ssm_a", "blk.0.ssm_conv1d.weight", "blk.0.attn_qkv.weight", "blk.0.ssm_dt.bias",
          "blk.0.ssm_out.weight", "blk.0.ffn_gate_inp_shexp.weight",
          "blk.0.post_attention_norm.weight"}) {
      EXPECT_THAT(load_error(without(gguf, t)), HasSubstr("tensor '" + t + "': missing")) << t;
    }
    const std::string ba = model == "qwen3_next" ? "blk.0.ssm_ba.weight" : "blk.0.ssm_alpha.weight";
    EXPECT_THAT(load_error(without(gguf, ba)), HasSubstr("tensor '" + ba + "': missing"));
  }
}

}  // namespace
}  // namespace steermoe::model

namespace steermoe::model {
namespace {

// The GGUF copy of `src` with tensors renamed (old name -> new name).
fs::path renamed(const fs::path& src, const std::vector<std::pair<std::string, std::string>>& map,
                 const std::string& tag) {
  const GgufFile f = GgufFile::open(src);
  const fs::path out = fs::path(testing::TempDir()) / ("renamed_" + tag + ".gguf");
  GgufWriter w(out);
  for (const auto& [k, v] : f.metadata()) {
    if (k != "general.alignment") w.add(k, v);
  }
  for (const GgufTensorInfo& info : f.tensor_infos()) {
    std::string name = info.name;
    for (const auto& [from, to] : map) {
      const size_t at = name.find(from);
      if (at != std::string::npos) name.replace(at, from.size(), to);
    }
    const TensorView t = f.tensor(info.name);
    w.add_tensor(name, t.dtype, t.shape, t.bytes());
  }
  w.finish();
  return out;
}

std::vector<float> rows_of(const kernels::Matrix& m) {
  std::vector<float> v(m.rows * m.cols);
  for (size_t r = 0; r < m.rows; ++r) kernels::dequantize_row(m, r, v.data() + r * m.cols);
  return v;
}

// llama.cpp's names and types (its converter's, and what its loader requires): the norm before
// the feed-forward block is post_attention_norm, Qwen3-Next's fused beta/alpha is ssm_ba, and
// ssm_conv1d is F32 (its ssm_conv op reads nothing else) whatever the other tensors are. GGUFs
// steermoe wrote before 2026-12-07 (ffn_norm, ssm_beta_alpha) still load, to the same weights.
TEST(ConfigVariants, HybridGgufUsesLlamaCppNamesAndReadsEarlierOnes) {
  for (const std::string model : {"qwen3_next", "qwen3_5_moe"}) {
    SCOPED_TRACE(model);
    const bool next = model == "qwen3_next";
    const fs::path gguf = fs::path(testing::TempDir()) / ("names_" + model + ".gguf");
    ASSERT_EQ(run_cli("convert -m " + (kData / model).string() + " -o " + gguf.string() +
                      " --dtype bf16"),
              0);
    const fs::path q4 = fs::path(testing::TempDir()) / ("names_" + model + "_q8.gguf");
    ASSERT_EQ(run_cli("quantize -m " + gguf.string() + " --type q8_0 -o " + q4.string()), 0);
    for (const fs::path& file : {gguf, q4}) {
      const GgufFile f = GgufFile::open(file);
      std::set<std::string> names;
      for (const GgufTensorInfo& info : f.tensor_infos()) names.insert(info.name);
      EXPECT_TRUE(names.count("blk.0.post_attention_norm.weight")) << file;
      EXPECT_FALSE(names.count("blk.0.ffn_norm.weight")) << file;
      EXPECT_EQ(names.count("blk.0.ssm_ba.weight"), next ? 1u : 0u) << file;
      EXPECT_FALSE(names.count("blk.0.ssm_beta_alpha.weight")) << file;
      EXPECT_EQ(f.tensor("blk.0.ssm_conv1d.weight").dtype, DType::kF32) << file;
    }
    const fs::path legacy =
        renamed(gguf, {{"post_attention_norm", "ffn_norm"}, {"ssm_ba.", "ssm_beta_alpha."}}, model);
    ASSERT_EQ(load_error(legacy), "");
    const auto now = Model::load(gguf);
    const auto before = Model::load(legacy);
    for (int l = 0; l < now->config().layers; ++l) {
      const LayerWeights& a = now->layer(l);
      const LayerWeights& b = before->layer(l);
      EXPECT_TRUE(
          std::equal(a.ffn_norm.begin(), a.ffn_norm.end(), b.ffn_norm.begin(), b.ffn_norm.end()))
          << "layer " << l;
      if (!now->config().is_linear(l)) continue;
      EXPECT_EQ(rows_of(a.linear.b), rows_of(b.linear.b)) << "layer " << l;
      EXPECT_EQ(rows_of(a.linear.a), rows_of(b.linear.a)) << "layer " << l;
    }
  }
}

// A GGUF copy of `src` with metadata keys set (added when missing) and every tensor of layer
// `copy_layer` also written as layer `as_layer` (-1: none).
fs::path edited(const fs::path& src, const std::vector<std::pair<std::string, GgufValue>>& set,
                const std::string& tag, int copy_layer = -1, int as_layer = -1) {
  const GgufFile f = GgufFile::open(src);
  const fs::path out = fs::path(testing::TempDir()) / ("edited_" + tag + ".gguf");
  GgufWriter w(out);
  std::set<std::string> done;
  for (const auto& [k, v] : f.metadata()) {
    if (k == "general.alignment") continue;
    bool replaced = false;
    for (const auto& [sk, sv] : set) {
      if (sk == k) {
        w.add(k, sv);
        replaced = true;
      }
    }
    if (!replaced) w.add(k, v);
    done.insert(k);
  }
  for (const auto& [sk, sv] : set) {
    if (!done.count(sk)) w.add(sk, sv);
  }
  const std::string from = "blk." + std::to_string(copy_layer) + ".";
  for (const GgufTensorInfo& info : f.tensor_infos()) {
    const TensorView t = f.tensor(info.name);
    w.add_tensor(info.name, t.dtype, t.shape, t.bytes());
    if (copy_layer >= 0 && info.name.rfind(from, 0) == 0) {
      w.add_tensor("blk." + std::to_string(as_layer) + "." + info.name.substr(from.size()), t.dtype,
                   t.shape, t.bytes());
    }
  }
  w.finish();
  return out;
}

std::vector<float> logits_of(const fs::path& gguf) {
  const fs::path out = fs::path(testing::TempDir()) / "edited_logits.bin";
  EXPECT_EQ(run_cli("logits -m " + gguf.string() + " --tokens 5,17,250,3,99,42 -o " + out.string()),
            0);
  std::ifstream in(out, std::ios::binary);
  std::vector<float> v(6 * 300);
  in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(v.size() * 4));
  EXPECT_TRUE(in.good());
  return v;
}

// llama.cpp's converter puts a model's multi-token-prediction layers after its own, counts them in
// block_count and names their number in nextn_predict_layers; it writes the Gated DeltaNet
// pattern as attention.recurrent_layers when config.json has layer_types. steermoe runs the
// model's own layers only, takes the pattern from that array when present, and refuses a tensor
// of a layer past block_count (a file whose metadata and tensors disagree).
TEST(ConfigVariants, GgufNextnLayersRecurrentPatternAndStrayLayers) {
  const fs::path base = fs::path(STEERMOE_SOURCE_DIR) / "tests" / "data" / "llama_hybrid" /
                        "qwen3next" / "model.gguf";
  const std::vector<float> want = logits_of(base);
  // A fifth layer as MTP: block_count 5, nextn_predict_layers 1, layer 3's tensors again as 4.
  const fs::path mtp = edited(base,
                              {{"qwen3next.block_count", GgufValue::u32(5)},
                               {"qwen3next.nextn_predict_layers", GgufValue::u32(1)}},
                              "mtp", 3, 4);
  ASSERT_EQ(load_error(mtp), "");
  EXPECT_EQ(Model::load(mtp)->config().layers, 4);
  EXPECT_EQ(logits_of(mtp), want);
  // The same file without nextn_predict_layers would run layer 4 as a model layer: refused only
  // when the tensors go past block_count.
  const fs::path stray = edited(base, {}, "stray", 3, 4);
  EXPECT_THAT(load_error(stray),
              HasSubstr("tensor 'blk.4.attn_norm.weight': layer 4 is past the 4 layers of "
                        "metadata key 'qwen3next.block_count'"));
  EXPECT_THAT(
      load_error(edited(base, {{"qwen3next.nextn_predict_layers", GgufValue::u32(4)}}, "nextn4")),
      HasSubstr("nextn_predict_layers': expected fewer than block_count (4), found 4"));
  // The pattern from attention.recurrent_layers wins over a wrong full_attention_interval.
  const std::vector<bool> pattern = {true, true, true, false, false};
  const fs::path rec =
      edited(base,
             {{"qwen3next.full_attention_interval", GgufValue::u32(2)},
              {"qwen3next.attention.recurrent_layers", GgufValue::bool_array(pattern)}},
             "recurrent");
  ASSERT_EQ(load_error(rec), "");
  EXPECT_EQ(logits_of(rec), want);
  EXPECT_THAT(
      load_error(edited(
          base, {{"qwen3next.attention.recurrent_layers", GgufValue::bool_array({true, true})}},
          "recurrent_short")),
      HasSubstr("attention.recurrent_layers: expected an array of at least 4 bools, "
                "found 2 bool"));
}

// Interleaved mRoPE (llama.cpp's IMROPE, Qwen3.5): rotary pair k takes section k % 3 while
// k < 3 x that section's size, else a fourth position. The sections written must give every pair
// of the rotary half one of the three (else llama.cpp leaves pairs to the fourth position, and
// its logits drift from the first position on), and be [11, 11, 10] for the real shape.
TEST(ConfigVariants, Qwen35MropeSectionsCoverEveryRotaryPair) {
  auto sections_of = [](const ModelConfig& c) {
    std::vector<int32_t> s;
    for (const auto& [k, v] : gguf_model_metadata(c, "x")) {
      if (k != "qwen35moe.rope.dimension_sections") continue;
      for (const GgufValue& item : std::get<GgufArray>(v.value).items)
        s.push_back(std::get<int32_t>(item.value));
    }
    return s;
  };
  EXPECT_EQ(sections_of(shape_config("Qwen3.6-35B-A3B")), (std::vector<int32_t>{11, 11, 10, 0}));
  for (const int head_dim : {16, 32, 64, 96, 128, 256}) {
    for (const double factor : {0.25, 0.5, 1.0}) {
      ModelConfig c = shape_config("qwen35moe-small");
      c.head_dim = head_dim;
      c.rope_dim = static_cast<int>(head_dim * factor);
      const std::vector<int32_t> s = sections_of(c);
      ASSERT_EQ(s.size(), 4u);
      const int half = c.rotary_dim() / 2;
      EXPECT_EQ(s[0] + s[1] + s[2] + s[3], half) << head_dim << " x " << factor;
      for (int k = 0; k < half; ++k) {
        const bool covered = (k % 3 == 0 && k < 3 * s[0]) || (k % 3 == 1 && k < 3 * s[1]) ||
                             (k % 3 == 2 && k < 3 * s[2]);
        EXPECT_TRUE(covered) << "pair " << k << " of " << half;
      }
    }
  }
}

}  // namespace
}  // namespace steermoe::model
