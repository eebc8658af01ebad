// `steermoe quantize -t N` and `steermoe make-model --type`: the threads change nothing in the
// bytes, and a model made directly as a quantization scheme equals the same random model made as
// F32 and then quantized (make-model --type draws the same values and runs the same quantizers,
// chunk by chunk, without a whole-tensor f32 copy).
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "../cli_runner.hpp"
#include "model/gguf.hpp"

namespace steermoe::model {
namespace {

namespace fs = std::filesystem;
using test_support::run_cli;

fs::path temp(const std::string& name) {
  return fs::path(::testing::TempDir()) / name;
}

// Every tensor of `a` has the same name, type, shape and bytes in `b`, and b has no other.
void expect_same_tensors(const fs::path& a, const fs::path& b) {
  const GgufFile fa = GgufFile::open(a);
  const GgufFile fb = GgufFile::open(b);
  ASSERT_EQ(fa.tensor_infos().size(), fb.tensor_infos().size());
  for (const GgufTensorInfo& info : fa.tensor_infos()) {
    const TensorView ta = fa.tensor(info.name);
    const auto tb = fb.find_tensor(info.name);
    ASSERT_TRUE(tb.has_value()) << info.name;
    EXPECT_EQ(ta.dtype, tb->dtype) << info.name;
    EXPECT_EQ(ta.shape, tb->shape) << info.name;
    ASSERT_EQ(ta.nbytes, tb->nbytes) << info.name;
    EXPECT_TRUE(std::equal(ta.data, ta.data + ta.nbytes, tb->data)) << info.name;
  }
}

TEST(QuantizeThreads, BytesDoNotDependOnTheThreadCount) {
  const fs::path src = temp("src.gguf"), one = temp("t1.gguf"), three = temp("t3.gguf");
  ASSERT_EQ(
      run_cli("make-model --arch olmoe --shape olmoe-small --random -o " + src.string()).status, 0);
  for (const char* type : {"q4_k_m", "q8_0", "q6_k"}) {
    ASSERT_EQ(
        run_cli("quantize -m " + src.string() + " --type " + type + " -t 1 -o " + one.string())
            .status,
        0);
    ASSERT_EQ(
        run_cli("quantize -m " + src.string() + " --type " + type + " -t 3 -o " + three.string())
            .status,
        0);
    SCOPED_TRACE(type);
    expect_same_tensors(one, three);
  }
}

TEST(MakeModelType, EqualsF32ModelQuantized) {
  for (const char* type : {"q4_k_m", "q8_0", "q5_k_m", "q6_k"}) {
    SCOPED_TRACE(type);
    const fs::path f32 = temp("f32.gguf");
    fs::create_directories(temp("a"));
    fs::create_directories(temp("b"));
    const fs::path direct = temp("a") / "m.gguf", via = temp("b") / "m.gguf";
    ASSERT_EQ(run_cli("make-model --arch qwen3moe --shape qwen3moe-small --random --seed 5 "
                      "--dtype f32 -o " +
                      f32.string())
                  .status,
              0);
    ASSERT_EQ(
        run_cli("quantize -m " + f32.string() + " --type " + type + " -o " + via.string()).status,
        0);
    const auto made = run_cli(
        "make-model --arch qwen3moe --shape qwen3moe-small --random --seed 5 "
        "-t 2 --type " +
        std::string(type) + " -o " + direct.string());
    ASSERT_EQ(made.status, 0) << made.output;
    expect_same_tensors(direct, via);
  }
}

TEST(MakeModelType, RejectsUnknownSchemesAndNonGgufOutputs) {
  const auto bad = run_cli("make-model --arch olmoe --shape olmoe-small --random --type q3_x -o " +
                           temp("x.gguf").string());
  EXPECT_NE(bad.status, 0);
  EXPECT_NE(bad.output.find("q3_x"), std::string::npos) << bad.output;
  const auto folder = run_cli(
      "make-model --arch olmoe --shape olmoe-small --random --type q8_0 -o " + temp("hf").string());
  EXPECT_NE(folder.status, 0);
  EXPECT_NE(folder.output.find(".gguf"), std::string::npos) << folder.output;
}

}  // namespace
}  // namespace steermoe::model
