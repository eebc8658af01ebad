// safetensors reader (oracle files and one hand-made broken header per rule), writers, and
// sharded checkpoints with their index cross-checks.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "model/safetensors.hpp"
#include "test_util.hpp"

namespace steermoe::model {
namespace {

using testing::Bytes;
using testing::ScratchDir;

// header length + header text + `data_bytes` bytes (byte i = i).
std::vector<std::byte> make_file(const std::string& header, size_t data_bytes) {
  Bytes b;
  b.u64(header.size()).raw(header);
  for (size_t i = 0; i < data_bytes; ++i) b.u8(static_cast<uint8_t>(i));
  return b.take();
}
SafetensorsFile parse(const std::string& header, size_t data_bytes) {
  return SafetensorsFile::from_bytes(make_file(header, data_bytes), "hand.safetensors");
}

const std::string kValidHeader =
    R"({"__metadata__":{"format":"pt"},"b":{"dtype":"F16","shape":[2],"data_offsets":[16,20]},)"
    R"("a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}})";

TEST(Safetensors, HandMadeFile) {
  const SafetensorsFile f = parse(kValidHeader, 20);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  ASSERT_EQ(f.tensor_infos().size(), 2u);
  EXPECT_EQ(f.tensor_infos()[0].name, "a");  // sorted by offset
  const TensorView b = f.tensor("b");
  EXPECT_EQ(b.dtype, DType::kF16);
  EXPECT_EQ(b.shape, (std::vector<uint64_t>{2}));
  EXPECT_EQ(b.nbytes, 4u);
  EXPECT_EQ(static_cast<uint8_t>(b.data[0]), 16);
  EXPECT_EQ(f.data_offset(), 8 + kValidHeader.size());
  EXPECT_ERROR_WITH(f.tensor("c"), "hand.safetensors: tensor 'c': missing");
}

TEST(Safetensors, EmptyAndScalarTensors) {
  const SafetensorsFile f = parse(
      R"({"s":{"dtype":"F64","shape":[],"data_offsets":[0,8]},"e":{"dtype":"I64","shape":[0,3],"data_offsets":[8,8]}})",
      8);
  EXPECT_EQ(f.tensor("s").elements(), 1u);
  EXPECT_EQ(f.tensor("e").nbytes, 0u);
  EXPECT_EQ(parse("{}", 0).tensor_infos().size(), 0u);
}

TEST(Safetensors, RejectsBadHeaderLength) {
  EXPECT_ERROR_WITH(SafetensorsFile::from_bytes(std::vector<std::byte>(5), "s.st"),
                    "s.st: header length", "has 5 bytes");
  Bytes huge;
  huge.u64(200'000'000).raw("{}");
  EXPECT_ERROR_WITH(SafetensorsFile::from_bytes(huge.take(), "s.st"), "header length",
                    "exceeds the limit of 100000000");
  Bytes past;
  past.u64(1000).raw("{}");
  EXPECT_ERROR_WITH(SafetensorsFile::from_bytes(past.take(), "s.st"), "header length",
                    "only 2 bytes follow");
}

TEST(Safetensors, RejectsBadJson) {
  EXPECT_ERROR_WITH(parse("{\"a\":", 0), "header", "expected valid UTF-8 JSON");
  EXPECT_ERROR_WITH(parse("{\"\xff\xfe\":{}}", 0), "expected valid UTF-8 JSON");
  EXPECT_ERROR_WITH(parse("[]", 0), "header", "JSON object");
  EXPECT_ERROR_WITH(parse("", 0), "header", "JSON object");
  EXPECT_ERROR_WITH(
      parse(std::string(1, '{') + std::string(50, '[') + std::string(50, ']') + "}", 0),
      "nested deeper than 8");
  EXPECT_ERROR_WITH(
      parse(
          R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
          8),
      "duplicate key 'a'");
}

TEST(Safetensors, RejectsBadMetadata) {
  EXPECT_ERROR_WITH(parse(R"({"__metadata__":{"n":3}})", 0), "__metadata__ 'n'",
                    "expected a string, found 3");
  EXPECT_ERROR_WITH(parse(R"({"__metadata__":[1]})", 0), "__metadata__", "object of strings");
}

TEST(Safetensors, RejectsBadTensorEntries) {
  EXPECT_ERROR_WITH(parse(R"({"a":3})", 0), "tensor 'a'", "expected an object");
  EXPECT_ERROR_WITH(parse(R"({"a":{"dtype":"F33","shape":[1],"data_offsets":[0,4]}})", 4),
                    "tensor 'a' dtype", "unknown dtype 'F33'");
  EXPECT_ERROR_WITH(parse(R"({"a":{"shape":[1],"data_offsets":[0,4]}})", 4), "tensor 'a' dtype");
  EXPECT_ERROR_WITH(parse(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4),
                    "tensor 'a' shape", "non-negative integer, found -1");
  EXPECT_ERROR_WITH(parse(R"({"a":{"dtype":"F32","shape":[1.0],"data_offsets":[0,4]}})", 4),
                    "shape");
  EXPECT_ERROR_WITH(parse(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", 4),
                    "data_offsets", "[begin, end]");
  EXPECT_ERROR_WITH(parse(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}})", 4),
                    "end 0 is before begin 4");
  EXPECT_ERROR_WITH(parse(R"({"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,4]}})", 4),
                    "tensor 'a'", "needs 16 bytes, data_offsets give 4");
  EXPECT_ERROR_WITH(
      parse(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296,2],"data_offsets":[0,4]}})", 4),
      "element count overflows");
  EXPECT_ERROR_WITH(
      parse(R"({"a":{"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,4]}})", 4),
      "overflows");
}

TEST(Safetensors, RejectsGapsOverlapsAndUnusedBytes) {
  EXPECT_ERROR_WITH(parse(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8),
                    "tensor 'a' data_offsets", "expected to begin at 0");
  EXPECT_ERROR_WITH(
      parse(
          R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
          8),
      "tensor 'b'", "expected to begin at 8");
  EXPECT_ERROR_WITH(parse(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 5),
                    "data section", "cover 4 bytes", "has 5 bytes");
  EXPECT_ERROR_WITH(parse(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 4),
                    "data section");
}

TEST(Safetensors, EveryTruncationIsAnError) {
  const auto full = make_file(kValidHeader, 20);
  for (size_t n = 0; n < full.size(); ++n) {
    EXPECT_THROW(
        SafetensorsFile::from_bytes(
            std::vector<std::byte>(full.begin(), full.begin() + static_cast<ptrdiff_t>(n)), "cut"),
        Error)
        << n;
  }
}

TEST(Safetensors, ReadsTheOracleCheckpoints) {
  SKIP_WITHOUT_ORACLE();
  for (const char* model : {"olmoe", "qwen3moe", "deepseek2_v3", "deepseek2_moonlight"}) {
    SCOPED_TRACE(model);
    const Checkpoint c = Checkpoint::open(testing::oracle() / model / "hf");
    EXPECT_EQ(c.shard_count(), 1u);
    EXPECT_GT(c.tensor_count(), 50u);
    const TensorView embed = c.tensor("model.embed_tokens.weight");
    EXPECT_EQ(embed.shape, (std::vector<uint64_t>{300, 64}));
    EXPECT_EQ(embed.dtype, DType::kF32);
    EXPECT_TRUE(c.has_tensor("lm_head.weight"));
    EXPECT_FALSE(c.find_tensor("nope").has_value());
    EXPECT_ERROR_WITH(c.tensor("nope"), "tensor 'nope': missing");
  }
  // Also a path to the file itself.
  const Checkpoint direct =
      Checkpoint::open(testing::oracle() / "olmoe" / "hf" / "model.safetensors");
  EXPECT_EQ(direct.shard(0).metadata().at("format"), "pt");
}

TEST(SafetensorsWriter, RoundTrip) {
  ScratchDir dir;
  const auto path = dir / "m.safetensors";
  std::vector<float> values(12);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i) - 5.5f;
  const std::vector<int64_t> ids = {5, -7, 1LL << 40};
  SafetensorsWriter writer(path);
  writer.add_metadata("format", "pt");
  writer.add_tensor_f32("w.bf16", DType::kBF16, {3, 4}, values);
  writer.add_tensor("ids", DType::kI64, {3}, std::as_bytes(std::span(ids)));
  writer.add_tensor_f32("w.f32", DType::kF32, {2, 2, 3}, values);
  writer.add_tensor_f32("w.f16", DType::kF16, {12}, values);
  writer.add_tensor("streamed", DType::kU8, {5}, [](OutputFile& out) {
    for (uint8_t i = 0; i < 5; ++i) out.write(&i, 1);
  });
  EXPECT_EQ(writer.data_bytes(), 24u + 24u + 48u + 24u + 5u);
  writer.finish();

  const SafetensorsFile f = SafetensorsFile::open(path);
  EXPECT_EQ(f.data_offset() % 8, 0u);  // header padded so data is 8-aligned
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_EQ(f.tensor("w.bf16").to_f32(), values);
  EXPECT_EQ(f.tensor("w.f32").shape, (std::vector<uint64_t>{2, 2, 3}));
  EXPECT_EQ(f.tensor("w.f32").to_f32(), values);
  EXPECT_EQ(f.tensor("w.f16").to_f32(), values);
  EXPECT_EQ(std::memcmp(f.tensor("ids").data, ids.data(), 24), 0);
  EXPECT_EQ(static_cast<uint8_t>(f.tensor("streamed").data[4]), 4);
  // Declaration order is file order.
  EXPECT_EQ(f.tensor_infos()[0].name, "w.bf16");
  EXPECT_EQ(f.tensor_infos()[4].name, "streamed");
}

TEST(SafetensorsWriter, RejectsBadDeclarationsAndShortProducers) {
  ScratchDir dir;
  SafetensorsWriter writer(dir / "w.safetensors");
  const std::vector<float> four(4);
  writer.add_tensor_f32("a", DType::kF32, {4}, four);
  EXPECT_ERROR_WITH(writer.add_tensor_f32("a", DType::kF32, {4}, four), "tensor 'a'", "duplicate");
  EXPECT_ERROR_WITH(writer.add_tensor_f32("__metadata__", DType::kF32, {4}, four), "reserved");
  EXPECT_ERROR_WITH(writer.add_tensor_f32("q", DType::kQ8_0, {32}, std::vector<float>(32)),
                    "Q8_0 cannot be stored");
  EXPECT_ERROR_WITH(writer.add_tensor("b", DType::kF32, {3}, std::as_bytes(std::span(four))),
                    "needs 12 bytes, got 16");
  writer.add_tensor("c", DType::kF32, {2}, [](OutputFile& out) { out.write_zeros(4); });
  EXPECT_ERROR_WITH(writer.finish(), "tensor 'c'", "producer wrote 4 bytes, expected 8");
  EXPECT_FALSE(std::filesystem::exists(dir / "w.safetensors"));
}

// ---- sharded checkpoints ----

// Copies the olmoe HF twin into `folder` as shards of at most `max_bytes`.
std::vector<std::string> write_sharded_copy(const SafetensorsFile& source,
                                            const std::filesystem::path& folder,
                                            uint64_t max_bytes) {
  ShardedSafetensorsWriter writer(folder, max_bytes);
  for (const auto& [k, v] : source.metadata()) writer.add_metadata(k, v);
  for (const auto& info : source.tensor_infos()) {
    const TensorView t = source.tensor(info.name);
    writer.add_tensor(info.name, t.dtype, t.shape, t.bytes());
  }
  return writer.finish();
}

TEST(Checkpoint, ShardedCopyOfTheOracleMatchesTheSingleFile) {
  SKIP_WITHOUT_ORACLE();
  ScratchDir dir;
  const SafetensorsFile source =
      SafetensorsFile::open(testing::oracle() / "olmoe" / "hf" / "model.safetensors");
  const auto files = write_sharded_copy(source, dir.path(), 400'000);
  ASSERT_GE(files.size(), 3u);
  EXPECT_EQ(files[0], fmt::format("model-00001-of-{:05d}.safetensors", files.size()));

  const Checkpoint c = Checkpoint::open(dir.path());
  EXPECT_EQ(c.shard_count(), files.size());
  EXPECT_EQ(c.tensor_count(), source.tensor_infos().size());
  uint64_t total = 0;
  for (const auto& info : source.tensor_infos()) {
    const TensorView a = source.tensor(info.name);
    ASSERT_NO_FATAL_FAILURE(testing::expect_same_tensor(a, c.tensor(info.name), info.name));
    total += a.nbytes;
  }
  EXPECT_EQ(c.index_metadata().at("total_size"), std::to_string(total));
  for (size_t i = 0; i < c.shard_count(); ++i) {
    uint64_t shard_bytes = 0;
    for (const auto& info : c.shard(i).tensor_infos()) shard_bytes += info.nbytes();
    EXPECT_LE(shard_bytes, 400'000u);
  }
  // The index file alone opens the same checkpoint.
  EXPECT_EQ(Checkpoint::open(dir / std::string(Checkpoint::kIndexFile)).tensor_names(),
            c.tensor_names());
}

// A hand-made two-shard checkpoint: shard 1 holds x and y, shard 2 holds z.
struct TwoShards {
  ScratchDir& dir;
  void write(const std::string& index_json, bool z_also_has_x = false) {
    const std::vector<float> v(2, 1.0f);
    SafetensorsWriter s1(dir / "s1.safetensors");
    s1.add_tensor_f32("x", DType::kF32, {2}, v);
    s1.add_tensor_f32("y", DType::kF32, {2}, v);
    s1.finish();
    SafetensorsWriter s2(dir / "s2.safetensors");
    s2.add_tensor_f32("z", DType::kF32, {2}, v);
    if (z_also_has_x) s2.add_tensor_f32("x", DType::kF32, {2}, v);
    s2.finish();
    testing::write_text(dir / std::string(Checkpoint::kIndexFile), index_json);
  }
};

TEST(Checkpoint, CrossChecksTheIndex) {
  ScratchDir dir;
  TwoShards shards{dir};
  shards.write(
      R"({"metadata":{},"weight_map":{"x":"s1.safetensors","y":"s1.safetensors","z":"s2.safetensors"}})");
  const Checkpoint ok = Checkpoint::open(dir.path());
  EXPECT_EQ(ok.tensor_names(), (std::vector<std::string>{"x", "y", "z"}));
  EXPECT_EQ(ok.tensor("z").nbytes, 8u);

  shards.write(
      R"({"weight_map":{"x":"s1.safetensors","y":"s2.safetensors","z":"s2.safetensors"}})");
  EXPECT_ERROR_WITH(Checkpoint::open(dir.path()), "weight_map 'y'",
                    "tensor missing from shard s2.safetensors");

  shards.write(R"({"weight_map":{"x":"s1.safetensors","y":"s1.safetensors","z":"s2.safetensors"}})",
               true);
  EXPECT_ERROR_WITH(Checkpoint::open(dir.path()), "tensor 'x'", "stored in two shards");

  shards.write(R"({"weight_map":{"x":"s1.safetensors","z":"s2.safetensors"}})");
  EXPECT_ERROR_WITH(Checkpoint::open(dir.path()), "tensor 'y'", "not in weight_map");

  shards.write(
      R"({"weight_map":{"x":"s1.safetensors","y":"s1.safetensors","z":"s3.safetensors"}})");
  EXPECT_ERROR_WITH(Checkpoint::open(dir.path()), "s3.safetensors", "open");

  shards.write(R"({"weight_map":{"x":"../s1.safetensors"}})");
  EXPECT_ERROR_WITH(Checkpoint::open(dir.path()), "weight_map 'x'", "shard file name");

  shards.write(R"({"weight_map":{"x":1}})");
  EXPECT_ERROR_WITH(Checkpoint::open(dir.path()), "weight_map 'x'", "file name string");

  shards.write(R"({"metadata":{}})");
  EXPECT_ERROR_WITH(Checkpoint::open(dir.path()), "weight_map", "expected an object");

  shards.write(R"({"weight_map":{"x":"s1.safetensors","x":"s1.safetensors"}})");
  EXPECT_ERROR_WITH(Checkpoint::open(dir.path()), "duplicate key 'x'");
}

TEST(Checkpoint, EmptyFolderIsAnError) {
  ScratchDir dir;
  EXPECT_ERROR_WITH(Checkpoint::open(dir.path()),
                    "expected model.safetensors or model.safetensors.index.json");
  EXPECT_ERROR_WITH(Checkpoint::open(dir / "missing.safetensors"), "missing.safetensors: open");
}

TEST(Safetensors, FuzzSeedCorpusIsValid) {
  const auto corpus =
      std::filesystem::path(STEERMOE_SOURCE_DIR) / "fuzz" / "corpus" / "safetensors";
  size_t files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(corpus)) {
    SCOPED_TRACE(entry.path().string());
    EXPECT_NO_THROW(SafetensorsFile::open(entry.path()));
    EXPECT_LE(std::filesystem::file_size(entry.path()), 8192u);
    ++files;
  }
  EXPECT_GE(files, 3u);
  const SafetensorsFile mixed = SafetensorsFile::open(corpus / "mixed.safetensors");
  EXPECT_EQ(mixed.tensor("model.norm.weight").to_f32(), std::vector<float>(8, 1.0f));
}

}  // namespace
}  // namespace steermoe::model
