// `make-model` and `convert`: random models of every family in both formats load and run;
// converting GGUF -> HF -> GGUF (and HF -> GGUF -> HF) gives bit-identical tensors (by name) and
// bit-identical logits, also for the oracle models (incl. DeepSeek's kv_b_proj split).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "engine/engine.hpp"
#include "model/gguf.hpp"
#include "model/safetensors.hpp"
#include "tokenizer/tokenizer.hpp"

namespace steermoe::engine {
namespace {

namespace fs = std::filesystem;
const fs::path kOracle = fs::path(STEERMOE_ORACLE_DIR);

int run_cli(const std::string& args) {
  const std::string cmd = std::string(STEERMOE_BINARY) + " " + args + " > /dev/null 2>&1";
  const int st = std::system(cmd.c_str());
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

fs::path temp(const std::string& name) {
  return fs::path(testing::TempDir()) / ("conv_" + name);
}

// name -> (dtype, shape, bytes) of every tensor.
struct TensorBytes {
  model::DType dtype;
  std::vector<uint64_t> shape;
  std::vector<std::byte> bytes;
  bool operator==(const TensorBytes&) const = default;
};
std::map<std::string, TensorBytes> tensors(const fs::path& p) {
  std::map<std::string, TensorBytes> out;
  auto add = [&](const model::TensorView& t) {
    out[t.name] = {t.dtype, t.shape, std::vector<std::byte>(t.data, t.data + t.nbytes)};
  };
  if (p.extension() == ".gguf") {
    const model::GgufFile f = model::GgufFile::open(p);
    for (const auto& info : f.tensor_infos()) add(f.tensor(info.name));
  } else {
    const model::Checkpoint c = model::Checkpoint::open(p);
    for (const auto& name : c.tensor_names()) add(c.tensor(name));
  }
  return out;
}

std::vector<float> logits(const fs::path& model_path) {
  auto m = model::Model::load(model_path);
  Engine e(*m, {.context = 16});
  std::vector<int32_t> ids;
  for (int i = 0; i < 12; ++i) ids.push_back((i * 37 + 5) % m->config().vocab);
  std::vector<float> out(ids.size() * static_cast<size_t>(m->config().vocab));
  e.prefill(ids, out);
  return out;
}

void expect_same_logits(const fs::path& a, const fs::path& b) {
  const std::vector<float> la = logits(a), lb = logits(b);
  ASSERT_EQ(la.size(), lb.size());
  EXPECT_EQ(0, std::memcmp(la.data(), lb.data(), la.size() * sizeof(float))) << a << " vs " << b;
}

TEST(Convert, OracleGgufRoundTripIsExact) {
  for (const std::string m : {"olmoe", "qwen3moe", "deepseek2_v3", "deepseek2_moonlight"}) {
    SCOPED_TRACE(m);
    const fs::path src = kOracle / m / "model.gguf";
    const fs::path hf = temp(m + "_hf"), back = temp(m + "_back.gguf");
    fs::remove_all(hf);
    ASSERT_EQ(run_cli("convert -m " + src.string() + " -o " + hf.string()), 0);
    ASSERT_EQ(run_cli("convert -m " + hf.string() + " -o " + back.string()), 0);
    EXPECT_EQ(tensors(src), tensors(back));
    // The HF side equals the oracle's own HF twin tensor for tensor.
    EXPECT_EQ(tensors(hf / "model.safetensors").size(), tensors(kOracle / m / "hf").size());
    EXPECT_EQ(tensors(hf), tensors(kOracle / m / "hf"));
    expect_same_logits(src, hf);
    expect_same_logits(src, back);
    EXPECT_TRUE(fs::exists(hf / "tokenizer.json"));
  }
}

TEST(Convert, FusedHfTwinConvertsToTheSameGguf) {
  const fs::path out = temp("fused.gguf");
  ASSERT_EQ(
      run_cli("convert -m " + (kOracle / "olmoe" / "hf_fused").string() + " -o " + out.string()),
      0);
  EXPECT_EQ(tensors(out), tensors(kOracle / "olmoe" / "model.gguf"));
}

// make-model (random BF16 weights) of `arch` at `shape` into the HF folder `hf`, converted to
// the GGUF `gguf` and back to the HF folder `back`.
void make_and_round_trip(const std::string& arch, const std::string& shape, const fs::path& hf,
                         const fs::path& gguf, const fs::path& back) {
  fs::remove_all(hf);
  fs::remove_all(back);
  ASSERT_EQ(run_cli("make-model --arch " + arch + " --shape " + shape +
                    " --random --dtype bf16 -o " + hf.string()),
            0);
  ASSERT_EQ(run_cli("convert -m " + hf.string() + " -o " + gguf.string()), 0);
  ASSERT_EQ(run_cli("convert -m " + gguf.string() + " -o " + back.string()), 0);
}

TEST(MakeModel, SmallRandomModelsOfEveryFamilyRoundTrip) {
  for (const auto& [arch, shape] :
       std::vector<std::pair<std::string, std::string>>{{"olmoe", "olmoe-small"},
                                                        {"qwen3moe", "qwen3moe-small"},
                                                        {"deepseek", "deepseek-small"}}) {
    SCOPED_TRACE(shape);
    const fs::path hf = temp(shape + "_hf"), gguf = temp(shape + ".gguf"),
                   back = temp(shape + "_back");
    ASSERT_NO_FATAL_FAILURE(make_and_round_trip(arch, shape, hf, gguf, back));
    EXPECT_EQ(tensors(hf), tensors(back));
    expect_same_logits(hf, gguf);
    const std::vector<float> l = logits(hf);
    float max_abs = 0.0f;
    for (float v : l) {
      ASSERT_TRUE(std::isfinite(v));
      max_abs = std::max(max_abs, std::fabs(v));
    }
    EXPECT_GT(max_abs, 0.1f);  // random weights give non-degenerate logits
    auto m = model::Model::load(hf);
    EXPECT_EQ(m->layer(m->config().layers - 1).experts[0].gate.dtype, kernels::DType::kBF16);
  }
}

// Hybrid families: the round trip keeps every matrix bit-identical but not A_log (stored as
// -exp(A_log) in GGUF) nor the vectors' dtype (F32 in GGUF), so logits agree within rounding.
TEST(MakeModel, SmallHybridModelsRoundTripWithinRounding) {
  for (const auto& [arch, shape] : std::vector<std::pair<std::string, std::string>>{
           {"qwen35moe", "qwen35moe-small"}, {"qwen3next", "qwen3next-small"}}) {
    SCOPED_TRACE(shape);
    const fs::path hf = temp(shape + "_hf"), gguf = temp(shape + ".gguf"),
                   back = temp(shape + "_back");
    ASSERT_NO_FATAL_FAILURE(make_and_round_trip(arch, shape, hf, gguf, back));
    const auto a = tensors(hf), b = tensors(back);
    ASSERT_EQ(a.size(), b.size());
    for (const auto& [name, t] : a) {
      ASSERT_TRUE(b.count(name)) << name;
      // Matrices keep their bytes; a 1 x n gate (shared_expert_gate) is a vector in GGUF, F32
      // there as every vector, so it comes back in F32.
      if (t.shape.size() >= 2 && t.shape[0] > 1 && name.find("conv1d") == std::string::npos) {
        EXPECT_EQ(t, b.at(name)) << name;
      }
    }
    const std::vector<float> l1 = logits(hf), l2 = logits(gguf), l3 = logits(back);
    float max_abs = 0.0f, diff = 0.0f;
    for (size_t i = 0; i < l1.size(); ++i) {
      ASSERT_TRUE(std::isfinite(l1[i]));
      max_abs = std::max(max_abs, std::fabs(l1[i]));
      diff = std::max({diff, std::fabs(l1[i] - l2[i]), std::fabs(l1[i] - l3[i])});
    }
    EXPECT_GT(max_abs, 0.1f);
    EXPECT_LT(diff, 1e-3f * std::max(1.0f, max_abs));
    EXPECT_EQ(run_cli("run -m " + gguf.string() + " -p 'Hello' -n 4"), 0);
  }
}

// ".GGUF" is a GGUF file in every reader and writer (it made an HF folder of that name).
// general.file_type (what llama.cpp's tools print as the model's type) survives conversions:
// from the matrices when they share one plain type (GGUF -> HF -> GGUF lost it), else from a GGUF
// source (a quantized mixture kept as it is).
TEST(Convert, FileTypeSurvivesRoundTrips) {
  auto file_type = [](const fs::path& p) {
    return model::GgufFile::open(p).find_uint("general.file_type");
  };
  const fs::path bf16 = temp("ft_bf16.gguf"), hf = temp("ft_hf"), back = temp("ft_back.gguf");
  ASSERT_EQ(run_cli("make-model --arch olmoe --shape olmoe-small --random --dtype bf16 -o " +
                    bf16.string()),
            0);
  ASSERT_EQ(file_type(bf16), std::optional<uint64_t>(32));
  ASSERT_EQ(run_cli("convert -m " + bf16.string() + " -o " + hf.string()), 0);
  ASSERT_EQ(run_cli("convert -m " + hf.string() + " -o " + back.string()), 0);
  EXPECT_EQ(file_type(back), std::optional<uint64_t>(32));
  const fs::path q = temp("ft_q4km.gguf"), q_back = temp("ft_q4km_back.gguf");
  ASSERT_EQ(run_cli("quantize -m " + bf16.string() + " --type q4_k_m -o " + q.string()), 0);
  ASSERT_EQ(file_type(q), std::optional<uint64_t>(15));
  ASSERT_EQ(run_cli("convert -m " + q.string() + " -o " + q_back.string()), 0);
  EXPECT_EQ(file_type(q_back), std::optional<uint64_t>(15));
  const fs::path f16 = temp("ft_f16.gguf");
  ASSERT_EQ(run_cli("convert -m " + q.string() + " -o " + f16.string() + " --dtype f16"), 0);
  EXPECT_EQ(file_type(f16), std::optional<uint64_t>(1));
}

// GGUF keeps 1-D tensors (norms) in F32 whatever the source's type, as llama.cpp's converter
// does: the shipped model's BF16 norms written as BF16 aborted llama.cpp at its first forward.
TEST(Convert, GgufNormsAreF32) {
  const fs::path out = temp("norms_f32.gguf");
  ASSERT_EQ(run_cli("convert -m " +
                    (fs::path(STEERMOE_SOURCE_DIR) / "models" / "steer-olmoe-small").string() +
                    " -o " + out.string()),
            0);
  const model::GgufFile f = model::GgufFile::open(out);
  int vectors = 0, matrices_bf16 = 0;
  for (const auto& info : f.tensor_infos()) {
    if (info.ne.size() == 1) {
      ++vectors;
      EXPECT_EQ(info.type_name, "F32") << info.name;
    } else if (info.type_name == "BF16") {
      ++matrices_bf16;
    }
  }
  EXPECT_GT(vectors, 0);
  EXPECT_GT(matrices_bf16, 0);  // the matrices keep their type
}

TEST(MakeModel, AnUpperCaseGgufExtensionIsAGgufFile) {
  const fs::path out = fs::temp_directory_path() / "steermoe_upper.GGUF";
  fs::remove_all(out);
  ASSERT_EQ(run_cli("make-model --arch olmoe --shape olmoe-small --random --dtype bf16 -o " +
                    out.string()),
            0);
  EXPECT_TRUE(fs::is_regular_file(out));
  EXPECT_NO_THROW(model::Model::load(out));
  fs::remove_all(out);
}

TEST(MakeModel, WritesATokenizerSoRunWorks) {
  // HF folder and GGUF: the synthetic byte-level tokenizer round-trips text and `run` generates.
  for (const std::string& out : {temp("mm_hf").string(), temp("mm.gguf").string()}) {
    SCOPED_TRACE(out);
    fs::remove_all(out);
    ASSERT_EQ(run_cli("make-model --arch olmoe --shape olmoe-small --random -o " + out), 0);
    EXPECT_EQ(run_cli("run -m " + out + " -p 'Hello, world' -n 4"), 0);
    const auto tok = tokenizer::Tokenizer::load(out);
    const std::string text = "Hello, world! 123";
    EXPECT_EQ(tok.decode(tok.encode(text)), text);
    EXPECT_EQ(tok.size(), 300u);
  }
}

TEST(MakeModel, RejectsMismatchedArchAndUnknownShape) {
  EXPECT_NE(
      run_cli("make-model --arch qwen3moe --shape olmoe-small --random -o " + temp("x").string()),
      0);
  EXPECT_NE(run_cli("make-model --arch olmoe --shape OLMoE-2B --random -o " + temp("y").string()),
            0);
}

}  // namespace
}  // namespace steermoe::engine
