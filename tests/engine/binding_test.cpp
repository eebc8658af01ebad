// Binding weights checks names, dtypes and shapes: a GGUF rewritten with one tensor missing,
// mis-shaped or of an unusable dtype is rejected with the tensor named in the message.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "common/error.hpp"
#include "engine/engine.hpp"
#include "model/gguf.hpp"
#include "model/weights.hpp"

#include "../error_text.hpp"

namespace steermoe::model {
namespace {

namespace fs = std::filesystem;
using testing::HasSubstr;

const fs::path kOracle = fs::path(STEERMOE_ORACLE_DIR);

// Copies the olmoe oracle GGUF, letting `edit` change one tensor's (name, dtype, shape) or drop
// it (return false).
template <typename Edit>
fs::path rewrite(const std::string& name, Edit edit) {
  const GgufFile src = GgufFile::open(kOracle / "olmoe" / "model.gguf");
  const fs::path out = fs::path(testing::TempDir()) / (name + ".gguf");
  GgufWriter w(out);
  for (const auto& [k, v] : src.metadata()) {
    if (k != "general.alignment") w.add(k, v);
  }
  std::vector<std::vector<float>> keep;
  for (const GgufTensorInfo& info : src.tensor_infos()) {
    TensorView t = src.tensor(info.name);
    std::string tname = t.name;
    DType dtype = t.dtype;
    std::vector<uint64_t> shape = t.shape;
    if (!edit(tname, dtype, shape)) continue;
    if (dtype == t.dtype && shape == t.shape) {
      w.add_tensor(tname, dtype, shape, t.bytes());
    } else if (shape == t.shape) {  // same values, another dtype
      keep.push_back(t.to_f32());
      w.add_tensor_f32(tname, dtype, shape, keep.back());
    } else {
      uint64_t n = 1;
      for (uint64_t d : shape) n *= d;
      keep.emplace_back(n, 0.5f);
      w.add_tensor_f32(tname, dtype == DType::kI32 ? DType::kF32 : dtype, shape, keep.back());
    }
  }
  w.finish();
  return out;
}

std::string load_error(const fs::path& p) {
  return test_support::error_text([&] { Model::load(p); });
}

TEST(Binding, UnchangedCopyLoads) {
  const fs::path p =
      rewrite("same", [](std::string&, DType&, std::vector<uint64_t>&) { return true; });
  auto m = Model::load(p);
  EXPECT_EQ(m->config().layers, 3);
  EXPECT_EQ(m->layer(1).experts.size(), 16u);
}

TEST(Binding, MissingTensorIsNamed) {
  const fs::path p = rewrite("missing", [](std::string& n, DType&, std::vector<uint64_t>&) {
    return n != "blk.1.attn_k.weight";
  });
  EXPECT_THAT(load_error(p),
              HasSubstr("tensor 'blk.1.attn_k.weight': missing (expected shape [64, 64])"));
}

TEST(Binding, WrongShapeIsNamed) {
  const fs::path p = rewrite("shape", [](std::string& n, DType&, std::vector<uint64_t>& s) {
    if (n == "blk.2.ffn_down_exps.weight") s = {16, 64, 16};
    return true;
  });
  EXPECT_THAT(
      load_error(p),
      HasSubstr(
          "tensor 'blk.2.ffn_down_exps.weight': expected shape [16, 64, 32], found [16, 64, 16]"));
}

TEST(Binding, Bf16WeightsLoadAndRun) {
  const fs::path p = rewrite("bf16", [](std::string& n, DType& d, std::vector<uint64_t>&) {
    if (n.find("exps") != std::string::npos) d = DType::kBF16;
    return true;
  });
  auto m = Model::load(p);
  EXPECT_EQ(m->layer(0).experts[3].gate.dtype, kernels::DType::kBF16);
}

// Q8_0 (stretch goal): quantised experts are dequantised to f32 at load time; the logits stay
// close to the f32 model's (ggml's Q8_0 error) and the argmax mostly agrees.
TEST(Binding, Q8ExpertsLoadAndRunCloseToF32) {
  const fs::path p = rewrite("q8", [](std::string& n, DType& d, std::vector<uint64_t>&) {
    if (n.find("exps") != std::string::npos) d = DType::kQ8_0;
    return true;
  });
  auto q8 = Model::load(p);
  auto f32 = Model::load(kOracle / "olmoe" / "model.gguf");
  engine::Engine a(*q8, {.context = 8}), b(*f32, {.context = 8});
  float max_diff = 0.0f;
  for (int32_t tok : {297, 10, 200, 31}) {
    auto la = a.decode(tok);
    auto lb = b.decode(tok);
    for (size_t i = 0; i < la.size(); ++i) max_diff = std::max(max_diff, std::fabs(la[i] - lb[i]));
  }
  EXPECT_GT(max_diff, 0.0f);  // really quantised
  EXPECT_LT(max_diff, 0.2f);
}

TEST(Binding, NotAModelPath) {
  EXPECT_THAT(load_error(kOracle / "olmoe" / "tokens.json"),
              HasSubstr("expected a .gguf file or a folder"));
  EXPECT_THAT(load_error(kOracle / "tokenizer"), HasSubstr("config.json"));
}

}  // namespace
}  // namespace steermoe::model
