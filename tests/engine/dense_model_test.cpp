// Dense models (a Qwen3 without MoE layers, model_type "qwen3" / GGUF "qwen3"): the engine gives
// transformers' logits for tests/data/hf_models/qwen3_dense (bf16 weights, tied embeddings, GQA;
// tools/reference/make_hf_models.py) in every mode, the routing options are no-ops on it, the
// commands that run a model work with their default options, and the commands that need experts
// say the model has none.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../cli_runner.hpp"
#include "../error_text.hpp"
#include "../f32_file.hpp"
#include "../isa_guard.hpp"
#include "../json_test_util.hpp"
#include "../offload_params.hpp"
#include "common/error.hpp"
#include "engine/engine.hpp"
#include "model/hf_config.hpp"
#include "policy/calibration.hpp"

namespace steermoe::engine {
namespace {

namespace fs = std::filesystem;
using testing::HasSubstr;

const fs::path kModel =
    fs::path(STEERMOE_SOURCE_DIR) / "tests" / "data" / "hf_models" / "qwen3_dense";
constexpr float kTolerance = 1e-4f;  // max abs logit error, as for the other HF references

using test_support::read_f32;

std::vector<int32_t> reference_tokens() {
  std::ifstream in(kModel / "reference.json");
  return steermoe::test_support::parse_json_stream(in).at("tokens").get<std::vector<int32_t>>();
}

std::vector<float> decode_all(Engine& e, const std::vector<int32_t>& tokens) {
  std::vector<float> out;
  for (int32_t t : tokens) {
    const std::span<const float> l = e.decode(t);
    out.insert(out.end(), l.begin(), l.end());
  }
  return out;
}

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  float d = 0.0f;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) d = std::max(d, std::fabs(a[i] - b[i]));
  return d;
}

TEST(DenseQwen3, ConfigIsQwen3WithoutExperts) {
  auto m = model::Model::load(kModel);
  const model::ModelConfig& c = m->config();
  EXPECT_EQ(c.family, model::Family::kQwen3Moe);
  EXPECT_EQ(model::family_name(c), "qwen3");
  EXPECT_FALSE(c.has_moe());
  EXPECT_EQ(c.moe_layer_count(), 0);
  EXPECT_EQ(c.experts, 0);
  EXPECT_EQ(c.top_k, 0);
  EXPECT_EQ(c.dense_ffn, 64);
  EXPECT_EQ(c.heads, 4);
  EXPECT_EQ(c.kv_heads, 2);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_TRUE(c.tied_embeddings);
  EXPECT_EQ(c.qk_norm, model::QkNorm::kPerHead);
  EXPECT_THAT(c.summary(), HasSubstr("dense"));
}

// transformers' logits: token by token and batched (also in batches smaller than the prompt),
// with 1 and 2 threads, with the f32-activation kernels (the reference is float32 arithmetic).
TEST(DenseQwen3, MatchesTransformers) {
  test_support::F32ActivationKernels f32_kernels;  // transformers computed in float32
  const std::vector<int32_t> tokens = reference_tokens();
  const std::vector<float> incremental = read_f32(kModel / "logits_incremental.f32");
  const std::vector<float> full = read_f32(kModel / "logits_full.f32");
  auto m = model::Model::load(kModel);
  const auto V = static_cast<size_t>(m->config().vocab);
  ASSERT_EQ(full.size(), tokens.size() * V);
  for (int threads : {1, 2}) {
    SCOPED_TRACE("threads " + std::to_string(threads));
    Engine dec(*m, {.threads = threads, .context = 32});
    const float d = max_abs_diff(decode_all(dec, tokens), incremental);
    EXPECT_LT(d, kTolerance);
    for (int batch : {64, 5}) {
      Engine e(*m, {.threads = threads, .context = 32, .max_batch = batch});
      std::vector<float> got(tokens.size() * V);
      e.prefill(tokens, got);
      const float b = max_abs_diff(got, full);
      EXPECT_LT(b, kTolerance) << "batch " << batch;
      std::printf("[ dense  ] threads %d: decode max abs %.3g, batched(%d) max abs %.3g\n", threads,
                  static_cast<double>(d), batch, static_cast<double>(b));
    }
  }
}

// Policy, cache size, calibration and link are about experts: on a dense model they are no-ops
// (same logits bit for bit), a calibration of another model's shape is not demanded to fit, and
// the routing record and counters stay empty.
TEST(DenseQwen3, RoutingOptionsAreNoOps) {
  const std::vector<int32_t> tokens = reference_tokens();
  auto m = model::Model::load(kModel);
  Engine plain(*m, {.context = 32});
  const std::vector<float> want = decode_all(plain, tokens);
  policy::RouterSpec other;
  other.experts = 16;
  other.top_k = 4;
  other.layers = 3;
  const policy::Calibration wrong_shape = policy::uninformed_calibration(other);
  for (const std::string link : {"resident", "disk", "emulated:5,20", "sim:rtx4090-olmoe"}) {
    SCOPED_TRACE(link);
    EngineParams params =
        test_support::offload_params(*m, "psr:lambda=1,n=1", 6, link, &wrong_shape);
    params.context = 32;
    Engine e(*m, params);
    RoutingRecord record;
    e.set_recorder(&record);
    EXPECT_EQ(decode_all(e, tokens), want);
    e.reset();
    std::vector<float> batched(want.size());
    e.prefill(tokens, batched);
    EXPECT_LT(max_abs_diff(batched, want), kTolerance);
    EXPECT_EQ(e.cache_slots(), 0);
    EXPECT_EQ(record.moe_layers, 0);
    EXPECT_EQ(record.steps(), 2 * tokens.size());
    EXPECT_TRUE(record.selected.empty());
    EXPECT_TRUE(record.scores.empty());
    EXPECT_EQ(e.cache_stats().layer_steps, 0);
    EXPECT_FALSE(e.cache_stats().physical);  // no scheduler: nothing is copied
  }
  // A policy typo is still an error.
  EXPECT_THROW(test_support::offload_params(*m, "no-such-policy", 0), Error);
}

std::string config_with(const std::string& extra) {
  return R"({"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"], "vocab_size": 300,
  "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
  "head_dim": 16, "intermediate_size": 64, "rms_norm_eps": 1e-6, "tie_word_embeddings": true)" +
         extra + "}";
}

std::string parse_error(const std::string& json) {
  return test_support::error_text([&] { model::parse_hf_config(json, "cfg.json"); });
}

TEST(DenseQwen3, ConfigRejectsWhatIsNotSupported) {
  EXPECT_EQ(parse_error(config_with("")), "");
  EXPECT_THAT(parse_error(config_with(R"(, "attention_bias": true)")),
              HasSubstr("cfg.json: attention_bias: expected false"));
  EXPECT_THAT(parse_error(config_with(R"(, "use_sliding_window": true)")),
              HasSubstr("cfg.json: use_sliding_window: expected false"));
  EXPECT_THAT(
      parse_error(config_with(R"(, "layer_types": ["full_attention", "sliding_attention"])")),
      HasSubstr("cfg.json: layer_types[1]: expected \"full_attention\""));
  EXPECT_THAT(parse_error(config_with(R"(, "layer_types": ["full_attention"])")),
              HasSubstr("cfg.json: layer_types: expected a list of 2 entries"));
  // A Qwen3-MoE whose every layer is dense still names experts: refused as before.
  EXPECT_THAT(parse_error(R"({"model_type": "qwen3_moe", "vocab_size": 300, "hidden_size": 32,
    "num_hidden_layers": 1, "num_attention_heads": 4, "head_dim": 16, "intermediate_size": 64,
    "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 16,
    "mlp_only_layers": [0]})"),
              HasSubstr("expected at least one MoE layer"));
  // The config.json the writers emit for a dense model reads back as the same model.
  const model::ModelConfig c = model::parse_hf_config(config_with(""), "cfg.json");
  const model::ModelConfig back =
      model::parse_hf_config(model::hf_config_json(c, "bfloat16"), "written.json");
  EXPECT_FALSE(back.has_moe());
  EXPECT_EQ(back.dense_ffn, 64);
  EXPECT_EQ(back.head_dim, 16);
  EXPECT_TRUE(back.tied_embeddings);
}

using Result = test_support::CliResult;
Result cli(const std::string& args) {
  return test_support::run_cli(args);
}

fs::path temp(const std::string& name) {
  return fs::path(testing::TempDir()) / name;
}

// make-model writes a dense qwen3 (HF folder with a tokenizer, and GGUF arch "qwen3"); the
// commands that run a model work on it with their default options (a stray calib.smcal beside
// it is not demanded to fit), and trace / bench / kl say it has no MoE layers.
TEST(DenseQwen3, CommandsRunWithDefaultOptions) {
  const fs::path hf = temp("dense_hf"), gguf = temp("dense.gguf");
  fs::remove_all(hf);
  Result r = cli("make-model --arch qwen3 --shape qwen3-small --random -o " + hf.string());
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("qwen3: 2 layers (dense"));
  r = cli("make-model --arch qwen3moe --shape qwen3-small --random -o " + temp("x").string());
  EXPECT_NE(r.status, 0);
  EXPECT_THAT(r.output, HasSubstr("does not match the shape's family 'qwen3'"));
  r = cli("make-model --arch qwen3 --shape qwen3-small --random -o " + gguf.string());
  ASSERT_EQ(r.status, 0) << r.output;
  const fs::path text = temp("dense.txt");
  std::ofstream(text) << "the cat sat on the mat and the dog sat on the log. the end.";
  const fs::path requests = temp("dense_score.jsonl");
  std::ofstream(requests) << R"({"context": "the cat", "continuation": " sat"})"
                          << "\n";
  // A calibration file of an MoE model's shape beside the dense model: not used, not an error.
  {
    const fs::path moe = temp("dense_moe_for_calib.gguf");
    ASSERT_EQ(cli("make-model --arch olmoe --shape olmoe-small --random -o " + moe.string()).status,
              0);
    const fs::path dir = temp("dense_calib_trace");
    fs::remove_all(dir);
    ASSERT_EQ(
        cli("trace -m " + moe.string() + " -f " + text.string() + " -o " + dir.string()).status, 0);
    ASSERT_EQ(
        cli("calibrate --trace " + dir.string() + " -o " + (hf / "calib.smcal").string()).status,
        0);
  }
  for (const fs::path& model : {hf, gguf}) {
    SCOPED_TRACE(model.string());
    const std::string m = " -m " + model.string();
    r = cli("run" + m + " -p 'Hello' -n 6 --ignore-eos");
    EXPECT_EQ(r.status, 0) << r.output;
    EXPECT_THAT(r.output, HasSubstr("decode: 5 tokens"));
    EXPECT_THAT(r.output, HasSubstr("experts: none (dense model)"));
    r = cli("run" + m + " -p 'Hello' -n 3 --policy psr:lambda=1,n=1 --residency 0.5 --link disk");
    EXPECT_EQ(r.status, 0) << r.output;
    const fs::path out = temp("dense_logits.bin");
    r = cli("logits" + m + " --tokens 1,2,3,4 -o " + out.string());
    EXPECT_EQ(r.status, 0) << r.output;
    EXPECT_EQ(read_f32(out).size(), 4u * 300u);
    r = cli("logits" + m + " --tokens 1,2,3,4 --batched -o " + temp("dense_logits_b.bin").string());
    EXPECT_EQ(r.status, 0) << r.output;
    EXPECT_LT(max_abs_diff(read_f32(out), read_f32(temp("dense_logits_b.bin"))), kTolerance);
    r = cli("perplexity" + m + " -f " + text.string() + " --window 16");
    ASSERT_EQ(r.status, 0) << r.output;
    const nlohmann::json j = steermoe::parse_json_or_throw(r.output.substr(r.output.find('{')));
    EXPECT_GT(j.at("perplexity").get<double>(), 1.0);
    r = cli("score" + m + " --requests " + requests.string());
    EXPECT_EQ(r.status, 0) << r.output;
    EXPECT_THAT(r.output, HasSubstr("loglikelihood"));
    r = cli("tokenize" + m + " --text 'the cat'");
    EXPECT_EQ(r.status, 0) << r.output;
    r = cli("detokenize" + m + " --ids 116,104,101");
    EXPECT_EQ(r.status, 0) << r.output;
    EXPECT_THAT(r.output, HasSubstr("the"));
    for (const std::string& cmd :
         {"trace" + m + " -f " + text.string() + " -o " + temp("dense_trace").string(),
          "bench" + m + " -f " + text.string(),
          "kl" + m + " -f " + text.string() + " --policy exact:evict=lru"}) {
      SCOPED_TRACE(cmd);
      r = cli(cmd);
      EXPECT_NE(r.status, 0);
      EXPECT_THAT(r.output, HasSubstr("has no MoE layers"));
    }
  }
}

}  // namespace
}  // namespace steermoe::engine
