// GGUF writer: round trips of every metadata type and tensor dtype, alignment, streaming
// producers, and the validation of what is declared.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>

#include "model/gguf.hpp"
#include "test_util.hpp"

namespace steermoe::model {
namespace {

using testing::ScratchDir;

std::vector<std::pair<std::string, GgufValue>> every_type() {
  GgufArray nested{GgufType::kArray,
                   {GgufValue::i32_array(std::vector<int32_t>{1, 2}),
                    GgufValue::i32_array(std::vector<int32_t>{})}};
  return {
      {"t.u8", GgufValue::u8(200)},
      {"t.i8", GgufValue::i8(-100)},
      {"t.u16", GgufValue::u16(60000)},
      {"t.i16", GgufValue::i16(-30000)},
      {"t.u32", GgufValue::u32(4000000000u)},
      {"t.i32", GgufValue::i32(-2000000000)},
      {"t.f32", GgufValue::f32(1e-6f)},
      {"t.bool", GgufValue::boolean(true)},
      {"t.string", GgufValue::string("héllo\nworld")},
      {"t.empty_string", GgufValue::string("")},
      {"t.u64", GgufValue::u64(~uint64_t{0})},
      {"t.i64", GgufValue::i64(-(int64_t{1} << 62))},
      {"t.f64", GgufValue::f64(3.141592653589793)},
      {"tokenizer.ggml.tokens", GgufValue::string_array({"a", "b c", "", "<|bos|>"})},
      {"tokenizer.ggml.merges", GgufValue::string_array({"a b", "ab c"})},
      {"tokenizer.ggml.token_type", GgufValue::i32_array(std::vector<int32_t>{1, 1, 3, 3})},
      {"t.f32_array", GgufValue::f32_array(std::vector<float>{0.5f, -1.0f})},
      {"t.u32_array", GgufValue::u32_array(std::vector<uint32_t>{})},
      {"t.bool_array", GgufValue::bool_array({true, false})},
      {"t.nested", GgufValue::array(nested)},
  };
}

TEST(GgufWriter, RoundTripsEveryMetadataTypeAndTensorDtype) {
  ScratchDir dir;
  const auto path = dir / "rt.gguf";
  std::vector<float> f32(6 * 5);
  for (size_t i = 0; i < f32.size(); ++i) f32[i] = static_cast<float>(i) * 0.25f - 3.0f;
  std::vector<float> q8(2 * 64);
  // Integers in [-127, 127] with 127 in every block of 32: scale 1.0, so Q8_0 is exact.
  for (size_t i = 0; i < q8.size(); ++i) {
    q8[i] = i % 32 == 0 ? 127.0f : static_cast<float>(static_cast<int>(i * 37 % 255) - 127);
  }
  const std::vector<int32_t> ints = {1, -2, 3};

  GgufWriter writer(path);
  for (auto& [key, value] : every_type()) writer.add(key, value);
  writer.add_tensor("w.f32", DType::kF32, {6, 5}, std::as_bytes(std::span(f32)));
  writer.add_tensor_f32("w.f16", DType::kF16, {6, 5}, f32);
  writer.add_tensor_f32("w.bf16", DType::kBF16, {2, 3, 5}, f32);
  writer.add_tensor_f32("w.q8", DType::kQ8_0, {2, 64}, q8);
  writer.add_tensor("w.i32", DType::kI32, {3}, std::as_bytes(std::span(ints)));
  writer.add_tensor("w.stream", DType::kF32, {7}, [](OutputFile& out) {
    for (int i = 0; i < 7; ++i) {  // one element at a time: the writer never needs the whole tensor
      const float v = static_cast<float>(i * i);
      out.write(&v, sizeof v);
    }
  });
  writer.finish();
  EXPECT_FALSE(std::filesystem::exists(path.string() + ".tmp"));

  const GgufFile f = GgufFile::open(path);
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_FALSE(f.has("general.alignment"));  // default alignment is not written
  EXPECT_EQ(f.metadata(), every_type());     // same keys, types, values and order
  EXPECT_EQ(f.get_string_array("tokenizer.ggml.tokens")[1], "b c");

  ASSERT_EQ(f.tensor_infos().size(), 6u);
  EXPECT_EQ(f.tensor_infos()[0].ne, (std::vector<uint64_t>{5, 6}));  // stored innermost first
  EXPECT_EQ(f.tensor("w.f32").to_f32(), f32);
  EXPECT_EQ(f.tensor("w.f16").to_f32(), f32);  // all values exact in f16 and bf16
  EXPECT_EQ(f.tensor("w.bf16").shape, (std::vector<uint64_t>{2, 3, 5}));
  EXPECT_EQ(f.tensor("w.bf16").to_f32(), f32);
  EXPECT_EQ(f.tensor("w.q8").dtype, DType::kQ8_0);
  EXPECT_EQ(f.tensor("w.q8").to_f32(), q8);  // small integers survive Q8_0 exactly
  const TensorView i32 = f.tensor("w.i32");
  EXPECT_EQ(i32.dtype, DType::kI32);
  EXPECT_EQ(std::memcmp(i32.data, ints.data(), 12), 0);
  EXPECT_EQ(f.tensor("w.stream").to_f32(), (std::vector<float>{0, 1, 4, 9, 16, 25, 36}));
  for (const auto& info : f.tensor_infos()) {
    EXPECT_EQ((f.data_offset() + info.offset) % 32, 0u) << info.name;
  }
}

TEST(GgufWriter, CustomAlignmentIsRecordedAndUsed) {
  ScratchDir dir;
  const std::vector<float> a(3, 1.0f);
  const std::vector<float> b(5, 2.0f);
  GgufWriter writer(dir / "a.gguf", 256);
  writer.add("general.architecture", GgufValue::string("x"));
  writer.add_tensor_f32("a", DType::kF32, {3}, a);
  writer.add_tensor_f32("b", DType::kF32, {5}, b);
  writer.finish();
  const GgufFile f = GgufFile::open(dir / "a.gguf");
  EXPECT_EQ(f.alignment(), 256u);
  EXPECT_EQ(f.get_u32("general.alignment"), 256u);
  EXPECT_EQ(f.tensor_infos()[1].offset, 256u);
  EXPECT_EQ(f.data_offset() % 256, 0u);
  EXPECT_EQ(f.tensor("b").to_f32(), b);
  EXPECT_ERROR_WITH(GgufWriter(dir / "x.gguf", 48), "alignment", "power of two");
}

TEST(GgufWriter, ProducerWritingTheWrongSizeLeavesNoFile) {
  ScratchDir dir;
  const auto path = dir / "bad.gguf";
  GgufWriter writer(path);
  writer.add_tensor("short", DType::kF32, {4}, [](OutputFile& out) { out.write_zeros(12); });
  EXPECT_ERROR_WITH(writer.finish(), "bad.gguf", "tensor 'short'",
                    "producer wrote 12 bytes, expected 16");
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_FALSE(std::filesystem::exists(path.string() + ".tmp"));
}

TEST(GgufWriter, RejectsBadDeclarations) {
  ScratchDir dir;
  GgufWriter writer(dir / "w.gguf");
  const std::vector<float> four(4);
  writer.add("k", GgufValue::u32(1));
  EXPECT_ERROR_WITH(writer.add("k", GgufValue::u32(2)), "metadata key 'k'", "duplicate key");
  EXPECT_ERROR_WITH(writer.add("", GgufValue::u32(2)), "non-empty");
  EXPECT_ERROR_WITH(writer.add("mixed", GgufValue::array({GgufType::kString, {GgufValue::u32(1)}})),
                    "array declared as string holds a uint32");
  EXPECT_ERROR_WITH(writer.add("general.alignment", GgufValue::u32(64)), "general.alignment");
  writer.add_tensor_f32("t", DType::kF32, {4}, four);
  EXPECT_ERROR_WITH(writer.add_tensor_f32("t", DType::kF32, {4}, four), "tensor 't'", "duplicate");
  EXPECT_ERROR_WITH(writer.add_tensor_f32("u", DType::kF32, {5}, four), "tensor 'u'",
                    "needs 5 values, got 4");
  EXPECT_ERROR_WITH(writer.add_tensor("v", DType::kF32, {3}, std::as_bytes(std::span(four))),
                    "tensor 'v'", "needs 12 bytes, got 16");
  EXPECT_ERROR_WITH(writer.add_tensor_f32("w", DType::kU16, {4}, four),
                    "U16 cannot be stored in GGUF");
  EXPECT_ERROR_WITH(writer.add_tensor_f32("x", DType::kF32, {1, 1, 1, 1, 4}, four),
                    "1..4 dimensions");
  EXPECT_ERROR_WITH(writer.add_tensor_f32("y", DType::kQ8_0, {2, 16}, std::vector<float>(32)),
                    "multiple of 32");
  // What was accepted still writes a valid file.
  writer.finish();
  const GgufFile f = GgufFile::open(dir / "w.gguf");
  EXPECT_EQ(f.tensor_infos().size(), 1u);
  EXPECT_EQ(f.get_u32("k"), 1u);
}

TEST(GgufWriter, RewritingAnOracleFileIsByteIdentical) {
  SKIP_WITHOUT_ORACLE();
  ScratchDir dir;
  const auto source_path = testing::oracle() / "qwen3moe" / "model.gguf";
  const GgufFile source = GgufFile::open(source_path);
  GgufWriter writer(dir / "copy.gguf");
  for (const auto& [key, value] : source.metadata()) writer.add(key, value);
  for (const auto& info : source.tensor_infos()) {
    const TensorView t = source.tensor(info.name);
    writer.add_tensor(info.name, t.dtype, t.shape, t.bytes());
  }
  writer.finish();
  const GgufFile copy = GgufFile::open(dir / "copy.gguf");
  EXPECT_EQ(copy.metadata(), source.metadata());
  ASSERT_EQ(copy.tensor_infos().size(), source.tensor_infos().size());
  for (const auto& info : source.tensor_infos()) {
    const TensorView a = source.tensor(info.name);
    ASSERT_NO_FATAL_FAILURE(testing::expect_same_tensor(a, copy.tensor(info.name), info.name));
  }
  // Same layout rules as the independent writer: the files are identical up to its length.
  const auto original = testing::read_file(source_path);
  const auto rewritten = testing::read_file(dir / "copy.gguf");
  ASSERT_GE(rewritten.size(), original.size());
  EXPECT_EQ(std::memcmp(original.data(), rewritten.data(), original.size()), 0);
}

}  // namespace
}  // namespace steermoe::model
