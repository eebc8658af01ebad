// Tiny random models written by transformers 5.x itself (tests/data/hf_models, made by
// tools/reference/make_hf_models.py): a Qwen3-MoE saved with num_local_experts, DeepSeek-V3 with
// YaRN, OLMoE with clip_qkv and tied embeddings, Qwen3-Next and Qwen3.5-MoE (Gated DeltaNet), and
// a dense Qwen3 (no experts at all; bf16 weights, tied embeddings, GQA).
// The engine must give transformers' logits (incremental with a cache, and one full forward) and
// exactly transformers' routed experts, from the HF folder and from its GGUF twin made by
// `steermoe convert`.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../cli_runner.hpp"
#include "../isa_guard.hpp"
#include "../json_test_util.hpp"
#include "../offload_params.hpp"
#include "engine/engine.hpp"

namespace steermoe::engine {
namespace {

namespace fs = std::filesystem;
const fs::path kData = fs::path(STEERMOE_SOURCE_DIR) / "tests" / "data" / "hf_models";
constexpr float kTolerance = 1e-4f;  // max abs logit error (as for the llama.cpp oracle)

template <typename T>
std::vector<T> read_raw(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  EXPECT_TRUE(in) << p;
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<T> out(bytes.size() / sizeof(T));
  // an empty file (a dense model's experts.i32) leaves both pointers null: memcpy must not see them
  if (!out.empty()) std::memcpy(out.data(), bytes.data(), out.size() * sizeof(T));
  return out;
}

struct Reference {
  std::vector<int32_t> tokens;
  int vocab = 0, moe_layers = 0, top_k = 0;
  std::vector<float> full, incremental;  // [T][V]
  std::vector<int32_t> experts;          // [T][L][K] ascending
};

Reference load_reference(const std::string& name) {
  Reference r;
  const fs::path d = kData / name;
  std::ifstream in(d / "reference.json");
  const nlohmann::json j = steermoe::test_support::parse_json_stream(in);
  r.tokens = j.at("tokens").get<std::vector<int32_t>>();
  r.vocab = j.at("vocab").get<int>();
  r.moe_layers = j.at("moe_layers").get<int>();
  r.top_k = j.at("top_k").get<int>();
  r.full = read_raw<float>(d / "logits_full.f32");
  r.incremental = read_raw<float>(d / "logits_incremental.f32");
  r.experts = read_raw<int32_t>(d / "experts.i32");
  EXPECT_EQ(r.full.size(), r.tokens.size() * static_cast<size_t>(r.vocab));
  EXPECT_EQ(r.experts.size(),
            r.tokens.size() * static_cast<size_t>(r.moe_layers) * static_cast<size_t>(r.top_k));
  return r;
}

struct RunResult {
  std::vector<float> logits;      // [T][V]
  std::vector<int32_t> selected;  // [T][L][K]
};

RunResult run(const fs::path& path, const std::vector<int32_t>& tokens, bool batched,
              int threads = 1) {
  // transformers computed in float32: the f32-activation kernels (qwen3_dense has BF16 weights).
  test_support::F32ActivationKernels f32_kernels;
  auto m = model::Model::load(path);
  Engine e(*m, {.threads = threads, .context = 32});
  RoutingRecord record;
  e.set_recorder(&record);
  const auto V = static_cast<size_t>(m->config().vocab);
  RunResult r;
  r.logits.resize(tokens.size() * V);
  if (batched) {
    e.prefill(tokens, r.logits);
  } else {
    for (size_t t = 0; t < tokens.size(); ++t) {
      const std::span<const float> l = e.decode(tokens[t]);
      std::copy(l.begin(), l.end(), r.logits.begin() + static_cast<ptrdiff_t>(t * V));
    }
  }
  r.selected = record.selected;
  return r;
}

size_t argmax(const float* x, size_t n) {
  return static_cast<size_t>(std::max_element(x, x + n) - x);
}

// Max abs error, identical argmax per position, identical routed experts.
void expect_matches(const Reference& ref, const RunResult& got, const std::vector<float>& want,
                    const std::string& what) {
  SCOPED_TRACE(what);
  ASSERT_EQ(got.logits.size(), want.size());
  float max_err = 0.0f;
  for (size_t i = 0; i < want.size(); ++i)
    max_err = std::max(max_err, std::abs(got.logits[i] - want[i]));
  EXPECT_LT(max_err, kTolerance);
  const auto V = static_cast<size_t>(ref.vocab);
  for (size_t t = 0; t < ref.tokens.size(); ++t) {
    EXPECT_EQ(argmax(&got.logits[t * V], V), argmax(&want[t * V], V)) << "position " << t;
  }
  EXPECT_EQ(got.selected, ref.experts) << "routed experts differ from transformers'";
  std::printf("[ hf-ref ] %-40s max abs %.3g\n", what.c_str(), static_cast<double>(max_err));
}

int run_cli(const std::string& args) {
  return test_support::run_cli(args).status;
}

class HfReference : public testing::TestWithParam<std::string> {};

TEST_P(HfReference, HfFolderIncrementalAndBatched) {
  const std::string name = GetParam();
  const Reference ref = load_reference(name);
  expect_matches(ref, run(kData / name, ref.tokens, false), ref.incremental, name + " hf decode");
  expect_matches(ref, run(kData / name, ref.tokens, true), ref.full, name + " hf batched");
  expect_matches(ref, run(kData / name, ref.tokens, true, 2), ref.full, name + " hf batched t2");
}

TEST_P(HfReference, GgufTwinIncrementalAndBatched) {
  const std::string name = GetParam();
  const Reference ref = load_reference(name);
  const fs::path gguf = fs::path(testing::TempDir()) / ("hfref_" + name + ".gguf");
  ASSERT_EQ(run_cli("convert -m " + (kData / name).string() + " -o " + gguf.string()), 0);
  expect_matches(ref, run(gguf, ref.tokens, false), ref.incremental, name + " gguf decode");
  expect_matches(ref, run(gguf, ref.tokens, true), ref.full, name + " gguf batched");
  // And back to an HF folder (value heads, fused projections, A_log and (1 + w) norms undone).
  const fs::path back = fs::path(testing::TempDir()) / ("hfref_" + name + "_back");
  ASSERT_EQ(run_cli("convert -m " + gguf.string() + " -o " + back.string()), 0);
  expect_matches(ref, run(back, ref.tokens, false), ref.incremental, name + " gguf->hf decode");
}

// Offloaded experts (a logical cache of half the experts, copies over the disk and an emulated
// link) change latency, never the output: the same logits bit for bit as all-resident experts
// under the same policy, for the hybrid models too (their recurrent state is untouched by it),
// and with each layer's MoE in parts as its copies complete (--moe-wait ready: the shared
// experts of DeepSeek and Qwen3-Next / 3.5 go with the first part).
TEST_P(HfReference, OffloadedLinksGiveTheResidentOutput) {
  const std::string name = GetParam();
  const Reference ref = load_reference(name);
  auto m = model::Model::load(kData / name);
  auto decode_all = [&](const std::string& link, schedule::MoeWait wait = schedule::MoeWait::kAll) {
    EngineParams params =
        test_support::offload_params(*m, "exact:evict=lru", m->config().experts / 2, link);
    params.offload.moe_wait = wait;
    params.context = 32;
    Engine e(*m, params);
    std::vector<float> out;
    for (int32_t t : ref.tokens) {
      const std::span<const float> l = e.decode(t);
      out.insert(out.end(), l.begin(), l.end());
    }
    return out;
  };
  const std::vector<float> resident = decode_all("resident");
  for (const std::string link : {"disk", "emulated:5,20"}) {
    SCOPED_TRACE(link);
    EXPECT_EQ(decode_all(link), resident);
    EXPECT_EQ(decode_all(link, schedule::MoeWait::kReady), resident);
  }
}

INSTANTIATE_TEST_SUITE_P(Models, HfReference,
                         testing::Values("qwen3moe_v5", "deepseek_v3_yarn", "olmoe_clip",
                                         "qwen3_next", "qwen3_5_moe", "qwen3_dense"));

}  // namespace
}  // namespace steermoe::engine
