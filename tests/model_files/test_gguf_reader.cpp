// GGUF reader: the oracle files, a hand-made valid file, and one hand-made broken file per
// hardening rule (each must be rejected with a message naming the field).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <optional>

#include "model/gguf.hpp"
#include "model/safetensors.hpp"
#include "test_util.hpp"

namespace steermoe::model {
namespace {

using testing::Bytes;
using ::testing::HasSubstr;

constexpr uint32_t kF32 = 0;
constexpr uint32_t kQ8_0 = 8;
constexpr uint32_t kQ4_K = 12;

struct HandTensor {
  std::string name;
  std::vector<uint64_t> ne;
  uint32_t type = kF32;
  uint64_t offset = 0;
};

// Key/value encoders.
Bytes kv_u32(std::string_view key, uint32_t v) {
  Bytes b;
  b.str(key).u32(4).u32(v);
  return b;
}
Bytes kv_string(std::string_view key, std::string_view v) {
  Bytes b;
  b.str(key).u32(8).str(v);
  return b;
}

// A GGUF assembled field by field so that tests can break exactly one thing.
struct HandGguf {
  uint32_t magic = GgufFile::kMagic;
  uint32_t version = 3;
  std::optional<uint64_t> n_tensors_override;
  std::optional<uint64_t> n_kv_override;
  std::vector<Bytes> kvs = {kv_string("general.architecture", "test")};
  std::vector<HandTensor> tensors = {{"a", {4, 2}, kF32, 0}, {"b", {8}, kF32, 32}};
  uint64_t alignment = 32;
  uint64_t data_bytes = 64;

  std::vector<std::byte> build() const {
    Bytes b;
    b.u32(magic).u32(version);
    b.u64(n_tensors_override.value_or(tensors.size()));
    b.u64(n_kv_override.value_or(kvs.size()));
    for (const auto& kv : kvs) b.raw({reinterpret_cast<const char*>(kv.data().data()), kv.size()});
    for (const auto& t : tensors) {
      b.str(t.name).u32(static_cast<uint32_t>(t.ne.size()));
      for (uint64_t ne : t.ne) b.u64(ne);
      b.u32(t.type).u64(t.offset);
    }
    b.pad_to(alignment);
    // Data: float i at element i of the data section.
    for (uint64_t i = 0; i < data_bytes / 4; ++i) b.f32(static_cast<float>(i));
    return b.take();
  }
  GgufFile parse(const GgufLimits& limits = {}) const {
    return GgufFile::from_bytes(build(), "hand.gguf", limits);
  }
};

TEST(GgufReader, HandMadeFile) {
  const GgufFile f = HandGguf{}.parse();
  EXPECT_EQ(f.name(), "hand.gguf");
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_EQ(f.get_string("general.architecture"), "test");
  ASSERT_EQ(f.tensor_infos().size(), 2u);
  const GgufTensorInfo& a = f.tensor_infos()[0];
  EXPECT_EQ(a.ne, (std::vector<uint64_t>{4, 2}));
  EXPECT_EQ(a.shape, (std::vector<uint64_t>{2, 4}));  // reversed: outermost first
  EXPECT_EQ(a.nbytes, 32u);
  EXPECT_EQ(f.data_offset() % 32, 0u);
  const TensorView b = f.tensor("b");
  EXPECT_EQ(b.shape, (std::vector<uint64_t>{8}));
  EXPECT_EQ(b.to_f32(), (std::vector<float>{8, 9, 10, 11, 12, 13, 14, 15}));
  EXPECT_EQ(f.tensor("a").to_f32()[5], 5.0f);  // row 1, column 1 of [2, 4]
  EXPECT_FALSE(f.find_tensor("c").has_value());
  EXPECT_ERROR_WITH(f.tensor("c"), "hand.gguf: tensor 'c': missing");
}

TEST(GgufReader, AcceptsVersion2) {
  HandGguf g;
  g.version = 2;
  EXPECT_EQ(g.parse().version(), 2u);
}

TEST(GgufReader, RejectsBadMagicAndVersion) {
  HandGguf g;
  g.magic = 0x46554746;
  EXPECT_ERROR_WITH(g.parse(), "hand.gguf: magic: expected \"GGUF\"");
  g = HandGguf{};
  g.version = 1;
  EXPECT_ERROR_WITH(g.parse(), "hand.gguf: version: expected 2 or 3, found 1");
  g.version = 0x03000000;
  EXPECT_ERROR_WITH(g.parse(), "big-endian");
  EXPECT_ERROR_WITH(GgufFile::from_bytes({}, "empty.gguf"), "empty.gguf: magic");
}

TEST(GgufReader, RejectsCountsLargerThanTheFile) {
  HandGguf g;
  g.n_kv_override = uint64_t{1} << 60;
  EXPECT_ERROR_WITH(g.parse(), "metadata key count", "cannot fit");
  g = HandGguf{};
  g.n_tensors_override = 1000;
  EXPECT_ERROR_WITH(g.parse(), "tensor count", "cannot fit");
}

TEST(GgufReader, RejectsStringLengths) {
  HandGguf g;
  Bytes huge;
  huge.u64(uint64_t{1} << 62).raw("k");  // key length far above the cap
  g.kvs.push_back(huge);
  EXPECT_ERROR_WITH(g.parse(), "metadata key #1", "exceeds the limit");
  g = HandGguf{};
  Bytes past_end;
  past_end.u64(100000).raw("k");  // under the cap, but more than the bytes left
  g.kvs.push_back(past_end);
  EXPECT_ERROR_WITH(g.parse(), "metadata key #1", "the file ends");
  g = HandGguf{};
  g.kvs.push_back(kv_string("k", std::string(100, 'x')));
  GgufLimits limits;
  limits.max_string_bytes = 50;
  EXPECT_ERROR_WITH(g.parse(limits), "metadata key 'k'",
                    "string length 100 exceeds the limit of 50");
}

TEST(GgufReader, RejectsArrayLengths) {
  HandGguf g;
  Bytes arr;
  arr.str("arr").u32(9).u32(4).u64(uint64_t{1} << 40);  // array of 2^40 uint32
  g.kvs.push_back(arr);
  EXPECT_ERROR_WITH(g.parse(), "metadata key 'arr'", "exceeds the limit");
  g = HandGguf{};
  Bytes arr2;
  arr2.str("arr").u32(9).u32(8).u64(1000000);  // a million strings: at least 8 MB needed
  g.kvs.push_back(arr2);
  EXPECT_ERROR_WITH(g.parse(), "metadata key 'arr'", "only", "bytes left");
  g = HandGguf{};
  // Nested arrays deeper than the limit.
  Bytes nested;
  nested.str("deep").u32(9);
  for (int i = 0; i < 20; ++i) nested.u32(9).u64(1);
  nested.u32(4).u64(0);
  g.kvs.push_back(nested);
  EXPECT_ERROR_WITH(g.parse(), "metadata key 'deep'", "nested deeper than 8");
}

TEST(GgufReader, RejectsEmptyAndDuplicateKeys) {
  HandGguf g;
  g.kvs.push_back(kv_u32("", 1));
  EXPECT_ERROR_WITH(g.parse(), "metadata key #1", "non-empty");
  g = HandGguf{};
  g.kvs.push_back(kv_string("general.architecture", "again"));
  EXPECT_ERROR_WITH(g.parse(), "metadata key 'general.architecture'", "duplicate key");
}

TEST(GgufReader, RejectsInvalidValueTypes) {
  HandGguf g;
  Bytes bad;
  bad.str("k").u32(13).u32(0);
  g.kvs.push_back(bad);
  EXPECT_ERROR_WITH(g.parse(), "metadata key 'k' type",
                    "expected a GGUF value type 0..12, found 13");
  g = HandGguf{};
  Bytes bad_element;
  bad_element.str("k").u32(9).u32(77).u64(1);
  g.kvs.push_back(bad_element);
  EXPECT_ERROR_WITH(g.parse(), "element type", "found 77");
  g = HandGguf{};
  Bytes bad_bool;
  bad_bool.str("flag").u32(7).u8(2);
  g.kvs.push_back(bad_bool);
  EXPECT_ERROR_WITH(g.parse(), "metadata key 'flag'", "expected a bool (0 or 1), found 2");
}

TEST(GgufReader, Alignment) {
  HandGguf g;
  g.kvs.push_back(kv_u32("general.alignment", 48));
  EXPECT_ERROR_WITH(g.parse(), "general.alignment", "power of two", "found 48");
  g = HandGguf{};
  g.kvs.push_back(kv_u32("general.alignment", 0));
  EXPECT_ERROR_WITH(g.parse(), "general.alignment", "power of two");
  g = HandGguf{};
  g.kvs.push_back(kv_string("general.alignment", "32"));
  EXPECT_ERROR_WITH(g.parse(), "general.alignment", "expected an unsigned integer, found string");
  g = HandGguf{};
  g.kvs.push_back(kv_u32("general.alignment", 64));
  g.alignment = 64;
  g.tensors[1].offset = 64;
  g.data_bytes = 128;
  const GgufFile f = g.parse();
  EXPECT_EQ(f.alignment(), 64u);
  EXPECT_EQ(f.data_offset() % 64, 0u);
  EXPECT_EQ(f.tensor("b").to_f32()[0], 16.0f);
  g.tensors[1].offset = 32;  // aligned to 32 but not to 64
  EXPECT_ERROR_WITH(g.parse(), "tensor 'b'", "offset 32 is not a multiple of the alignment 64");
}

TEST(GgufReader, RejectsBadDimensions) {
  HandGguf g;
  g.tensors[0].ne = {};
  EXPECT_ERROR_WITH(g.parse(), "tensor 'a'", "expected 1..4 dimensions, found 0");
  g.tensors[0].ne = {1, 1, 1, 1, 32};
  EXPECT_ERROR_WITH(g.parse(), "tensor 'a'", "found 5");
  g.tensors[0].ne = {uint64_t{1} << 50};
  EXPECT_ERROR_WITH(g.parse(), "tensor 'a'", "ne[0]", "exceeds the limit");
  g.tensors[0].ne = {uint64_t{1} << 32, uint64_t{1} << 32};  // each fine, product overflows
  EXPECT_ERROR_WITH(g.parse(), "tensor 'a'", "element count overflows");
  g.tensors[0].ne = {uint64_t{1} << 31, uint64_t{1} << 32};  // 2^63 elements: bytes overflow
  EXPECT_ERROR_WITH(g.parse(), "tensor 'a'", "byte size overflows");
}

TEST(GgufReader, RejectsBadTensorTypes) {
  HandGguf g;
  g.tensors[0].type = 4;  // removed Q4_2
  EXPECT_ERROR_WITH(g.parse(), "tensor 'a'", "unknown ggml tensor type 4");
  g.tensors[0].type = 1000;
  EXPECT_ERROR_WITH(g.parse(), "unknown ggml tensor type 1000");
  g = HandGguf{};
  g.tensors[0] = {"q", {16, 2}, kQ8_0, 0};
  EXPECT_ERROR_WITH(g.parse(), "tensor 'q'", "multiple of 32, found 16");
}

TEST(GgufReader, UnsupportedTypesParseButCannotBeViewed) {
  HandGguf g;
  g.tensors = {{"k", {256}, 16, 0}};  // IQ2_XXS: 66 bytes per 256
  g.data_bytes = 96;
  const GgufFile f = g.parse();
  EXPECT_EQ(f.tensor_infos()[0].type_name, "IQ2_XXS");
  EXPECT_EQ(f.tensor_infos()[0].nbytes, 66u);
  EXPECT_FALSE(f.tensor_infos()[0].dtype.has_value());
  EXPECT_ERROR_WITH(f.tensor("k"), "tensor 'k'", "type IQ2_XXS is not supported");
}

// Every block type steermoe computes on is viewed in its stored type with ggml's byte sizes; a
// row that is not a whole number of blocks is rejected naming the tensor.
TEST(GgufReader, BlockTypesAreViewedInPlace) {
  struct Case {
    uint32_t id;
    DType dtype;
    uint64_t block, bytes;
  };
  for (const Case& c :
       {Case{2, DType::kQ4_0, 32, 18}, Case{3, DType::kQ4_1, 32, 20}, Case{6, DType::kQ5_0, 32, 22},
        Case{7, DType::kQ5_1, 32, 24}, Case{kQ4_K, DType::kQ4_K, 256, 144},
        Case{13, DType::kQ5_K, 256, 176}, Case{14, DType::kQ6_K, 256, 210},
        Case{10, DType::kQ2_K, 256, 84}, Case{11, DType::kQ3_K, 256, 110}}) {
    SCOPED_TRACE(c.id);
    HandGguf g;
    g.tensors = {{"w", {c.block, 2}, c.id, 0}};
    g.data_bytes = (2 * c.bytes + 31) / 32 * 32;
    const GgufFile f = g.parse();
    const TensorView v = f.tensor("w");
    EXPECT_EQ(v.dtype, c.dtype);
    EXPECT_EQ(v.nbytes, 2 * c.bytes);
    EXPECT_EQ(v.to_f32().size(), 2 * c.block);  // zero bytes: all zeros
    HandGguf bad;
    bad.tensors = {{"w", {c.block / 2, 4}, c.id, 0}};
    const std::string want = fmt::format("multiple of {}", c.block);
    EXPECT_ERROR_WITH(bad.parse(), std::string("tensor 'w'"), want);
  }
}

TEST(GgufReader, Q8_0Tensor) {
  HandGguf g;
  g.tensors = {{"q", {32, 2}, kQ8_0, 0}};
  g.data_bytes = 96;
  const GgufFile f = g.parse();
  const TensorView v = f.tensor("q");
  EXPECT_EQ(v.dtype, DType::kQ8_0);
  EXPECT_EQ(v.nbytes, 68u);
  EXPECT_EQ(v.shape, (std::vector<uint64_t>{2, 32}));
}

TEST(GgufReader, RejectsTensorsOutsideOrOverlapping) {
  HandGguf g;
  g.tensors[1].offset = 64;  // [64, 96) but the data section has 64 bytes
  EXPECT_ERROR_WITH(g.parse(), "tensor 'b'", "outside");
  g.tensors[1].offset = ~uint64_t{31};  // offset + size would wrap around
  EXPECT_ERROR_WITH(g.parse(), "tensor 'b'", "outside");
  g = HandGguf{};
  g.tensors[1].ne = {16};  // [32, 96)
  g.data_bytes = 96;
  g.tensors[0].ne = {12, 2};  // [0, 96): overlaps b
  g.tensors[0].offset = 0;
  EXPECT_ERROR_WITH(g.parse(), "overlap tensor");
  g = HandGguf{};
  g.tensors[1].offset = 0;  // both at 0
  EXPECT_ERROR_WITH(g.parse(), "overlap");
  g = HandGguf{};
  g.data_bytes = 0;  // header only: the data section is missing
  EXPECT_ERROR_WITH(g.parse(), "outside");
}

TEST(GgufReader, RejectsBadTensorNames) {
  HandGguf g;
  g.tensors[1].name = "a";
  EXPECT_ERROR_WITH(g.parse(), "tensor 'a'", "duplicate tensor name");
  g.tensors[1].name = "";
  EXPECT_ERROR_WITH(g.parse(), "tensor #1 name", "non-empty");
}

TEST(GgufReader, EveryTruncationAndByteFlipIsAnErrorOrValid) {
  HandGguf g;
  Bytes arr;
  arr.str("tokens").u32(9).u32(8).u64(2).str("ab").str("c");
  g.kvs.push_back(arr);
  const std::vector<std::byte> full = g.build();
  for (size_t n = 0; n < full.size(); ++n) {
    std::vector<std::byte> prefix(full.begin(), full.begin() + static_cast<ptrdiff_t>(n));
    EXPECT_THROW(GgufFile::from_bytes(std::move(prefix), "cut.gguf"), Error) << n;
  }
  const GgufFile ok = GgufFile::from_bytes(full, "full.gguf");
  const size_t header = ok.data_offset();
  for (size_t i = 0; i < header; ++i) {
    for (uint8_t mask : {0x01, 0x80, 0xff}) {
      std::vector<std::byte> bytes = full;
      bytes[i] ^= std::byte{mask};
      try {
        const GgufFile f = GgufFile::from_bytes(std::move(bytes), "flip.gguf");
        for (const auto& info : f.tensor_infos()) {
          if (info.dtype) (void)f.tensor(info.name);
        }
      } catch (const Error&) {
      }
    }
  }
}

// ---- typed getters ----

GgufFile getter_file() {
  HandGguf g;
  g.tensors.clear();
  g.data_bytes = 0;
  g.kvs.push_back(kv_u32("u", 7));
  Bytes neg;
  neg.str("neg").u32(5).put<int32_t>(-1);
  g.kvs.push_back(neg);
  Bytes f;
  f.str("eps").u32(6).f32(1e-5f);
  g.kvs.push_back(f);
  Bytes ints;
  ints.str("types").u32(9).u32(5).u64(3).put<int32_t>(1).put<int32_t>(3).put<int32_t>(-1);
  g.kvs.push_back(ints);
  Bytes strs;
  strs.str("tokens").u32(9).u32(8).u64(2).str("he").str("llo");
  g.kvs.push_back(strs);
  Bytes big;
  big.str("big").u32(10).u64(~uint64_t{0});
  g.kvs.push_back(big);
  return GgufFile::from_bytes(g.build(), "meta.gguf");
}

TEST(GgufReader, StrictGettersNameFileKeyAndTypes) {
  const GgufFile f = getter_file();
  EXPECT_EQ(f.get_u32("u"), 7u);
  EXPECT_EQ(f.get_i32("neg"), -1);
  EXPECT_FLOAT_EQ(f.get_f32("eps"), 1e-5f);
  EXPECT_EQ(f.get_string_array("tokens"), (std::vector<std::string>{"he", "llo"}));
  EXPECT_EQ(f.get_i32_array("types"), (std::vector<int32_t>{1, 3, -1}));
  EXPECT_ERROR_WITH(
      f.get_u32("general.architecture"),
      "meta.gguf: metadata key 'general.architecture': expected uint32, found string");
  EXPECT_ERROR_WITH(f.get_string_array("types"), "expected array of string, found array of int32");
  EXPECT_ERROR_WITH(f.get_f32_array("u"), "expected array of float32, found uint32");
  EXPECT_ERROR_WITH(f.get_u32("nope"), "meta.gguf: metadata key 'nope': missing");
  EXPECT_ERROR_WITH(f.get_bool("eps"), "expected bool, found float32");
}

TEST(GgufReader, LenientGetters) {
  const GgufFile f = getter_file();
  EXPECT_EQ(f.get_uint("u"), 7u);
  EXPECT_EQ(f.get_int("neg"), -1);
  EXPECT_ERROR_WITH(f.get_uint("neg"), "metadata key 'neg'", "value -1 does not fit in uint64");
  EXPECT_ERROR_WITH(f.get_int("big"), "does not fit in int64");
  EXPECT_EQ(f.get_uint("big"), ~uint64_t{0});
  EXPECT_NEAR(f.get_float("eps"), 1e-5, 1e-10);
  EXPECT_EQ(f.get_int_array("types"), (std::vector<int64_t>{1, 3, -1}));
  EXPECT_ERROR_WITH(f.get_int_array("tokens"), "expected array of integers, found array of string");
  EXPECT_EQ(f.find_uint("absent"), std::nullopt);
  EXPECT_EQ(f.find_uint("u"), 7u);
  EXPECT_EQ(f.find_string("general.architecture"), "test");
  EXPECT_ERROR_WITH((void)f.find_string("u"), "expected string, found uint32");
}

// ---- the oracle files (written by an independent writer, read by llama.cpp) ----

struct OracleModel {
  const char* folder;
  const char* arch;
  uint32_t layers;
  uint64_t hidden;
  size_t vocab;
  size_t merges;
  uint64_t eos;
};
// Facts from the oracle's README and llama.log (llama.cpp's reading of the same files).
constexpr OracleModel kOracleModels[] = {
    {"olmoe", "olmoe", 3, 64, 300, 40, 296},
    {"qwen3moe", "qwen3moe", 3, 64, 300, 40, 296},
    {"deepseek2_v3", "deepseek2", 4, 64, 300, 40, 296},
    {"deepseek2_moonlight", "deepseek2", 3, 64, 300, 40, 296},
    {"tokenizer", "olmoe", 1, 32, 1000, 739, 995},
};

TEST(GgufReader, ReadsEveryOracleFile) {
  SKIP_WITHOUT_ORACLE();
  for (const auto& model : kOracleModels) {
    SCOPED_TRACE(model.folder);
    const GgufFile f = GgufFile::open(testing::oracle() / model.folder / "model.gguf");
    EXPECT_EQ(f.version(), 3u);
    EXPECT_EQ(f.alignment(), 32u);
    EXPECT_EQ(f.get_string("general.architecture"), model.arch);
    EXPECT_EQ(f.get_string("tokenizer.ggml.model"), "gpt2");
    const auto tokens = f.get_string_array("tokenizer.ggml.tokens");
    ASSERT_EQ(tokens.size(), model.vocab);
    EXPECT_EQ(tokens[0], "\xC4\x80");  // byte-level BPE: byte 0 is U+0100
    EXPECT_EQ(f.get_string_array("tokenizer.ggml.merges").size(), model.merges);
    EXPECT_EQ(f.get_i32_array("tokenizer.ggml.token_type").size(), model.vocab);
    EXPECT_EQ(f.get_uint("tokenizer.ggml.eos_token_id"), model.eos);
    EXPECT_EQ(f.get_bool("tokenizer.ggml.add_bos_token"), false);
    EXPECT_EQ(f.get_u32(std::string(model.arch) + ".block_count"), model.layers);
    EXPECT_EQ(f.get_u32(std::string(model.arch) + ".embedding_length"), model.hidden);
    const TensorView embd = f.tensor("token_embd.weight");
    EXPECT_EQ(embd.shape, (std::vector<uint64_t>{model.vocab, model.hidden}));
    EXPECT_EQ(embd.dtype, DType::kF32);
    uint64_t total = 0;
    for (const auto& info : f.tensor_infos()) {
      EXPECT_EQ(info.dtype, DType::kF32) << info.name;
      EXPECT_EQ(f.tensor(info.name).nbytes, info.elements * 4);
      total += info.nbytes;
    }
    EXPECT_LE(f.data_offset() + total, f.bytes().size());
  }
  const GgufFile olmoe = GgufFile::open(testing::oracle() / "olmoe" / "model.gguf");
  const auto tokens = olmoe.get_string_array("tokenizer.ggml.tokens");
  EXPECT_EQ(tokens[296], "<|endoftext|>");
  EXPECT_EQ(tokens[297], "<|bos|>");
  EXPECT_EQ(olmoe.get_string_array("tokenizer.ggml.merges")[0], "\xC4\xA0 t");  // "Ġ t"
}

TEST(GgufReader, OracleTensorsMatchTheHfTwinBitForBit) {
  SKIP_WITHOUT_ORACLE();
  const GgufFile gguf = GgufFile::open(testing::oracle() / "olmoe" / "model.gguf");
  const SafetensorsFile hf =
      SafetensorsFile::open(testing::oracle() / "olmoe" / "hf" / "model.safetensors");
  const std::pair<const char*, const char*> twins[] = {
      {"token_embd.weight", "model.embed_tokens.weight"},
      {"output.weight", "lm_head.weight"},
      {"blk.0.attn_q.weight", "model.layers.0.self_attn.q_proj.weight"},
  };
  for (const auto& [gguf_name, hf_name] : twins) {
    SCOPED_TRACE(gguf_name);
    const TensorView a = gguf.tensor(gguf_name);
    const TensorView b = hf.tensor(hf_name);
    EXPECT_EQ(a.shape, b.shape);  // both row-major outermost first
    ASSERT_EQ(a.nbytes, b.nbytes);
    EXPECT_EQ(std::memcmp(a.data, b.data, a.nbytes), 0);
  }
  // Fused GGUF experts [E, ffn, hidden] hold HF's per-expert [ffn, hidden] matrices in order.
  const TensorView gate = gguf.tensor("blk.1.ffn_gate_exps.weight");
  ASSERT_EQ(gate.shape, (std::vector<uint64_t>{16, 32, 64}));
  const TensorView expert3 = hf.tensor("model.layers.1.mlp.experts.3.gate_proj.weight");
  ASSERT_EQ(expert3.shape, (std::vector<uint64_t>{32, 64}));
  EXPECT_EQ(std::memcmp(gate.data + 3 * expert3.nbytes, expert3.data, expert3.nbytes), 0);
}

TEST(GgufReader, FuzzSeedCorpusIsValid) {
  // The fuzzer's seeds should be valid files so that mutations start from deep parser states.
  const auto corpus = std::filesystem::path(STEERMOE_SOURCE_DIR) / "fuzz" / "corpus" / "gguf";
  size_t files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(corpus)) {
    SCOPED_TRACE(entry.path().string());
    const GgufFile f = GgufFile::open(entry.path());
    EXPECT_LE(std::filesystem::file_size(entry.path()), 8192u);
    for (const auto& info : f.tensor_infos()) {
      if (info.dtype) {
        EXPECT_EQ(f.tensor(info.name).nbytes, info.nbytes);
      }
    }
    ++files;
  }
  EXPECT_GE(files, 3u);
  const GgufFile every = GgufFile::open(corpus / "every_type.gguf");
  EXPECT_EQ(every.get_string_array("tokenizer.ggml.tokens").size(), 4u);
  EXPECT_EQ(every.tensor("blk.0.ffn_gate_exps.weight").dtype, DType::kBF16);
}

}  // namespace
}  // namespace steermoe::model
