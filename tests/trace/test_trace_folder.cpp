// Trace folders: writer/reader round trip, numpy-written traces, and the validation messages.
#include <cmath>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>

#include "../json_test_util.hpp"
#include "common/error.hpp"
#include "test_util.hpp"
#include "trace/trace.hpp"

namespace steermoe::trace {
namespace {

using testing::ScratchDir;
using testing::write_text;

TraceMeta small_meta() {
  TraceMeta meta;
  meta.layers = 2;
  meta.experts = 3;
  meta.top_k = 2;
  meta.router = "softmax";
  meta.moe_layer_ids = {1, 3};
  meta.model = "tiny";
  return meta;
}

float value(int64_t t, int l, int e, float offset) {
  return offset + static_cast<float>(t * 100 + l * 10 + e);
}

// Writes a 5-step trace with two sequences (starts 0 and 3).
void write_small_trace(const std::filesystem::path& dir, bool weights,
                       TraceMeta meta = small_meta()) {
  TraceWriter writer(dir, meta, weights);
  std::vector<float> scores(6), pregate(6), weight_scores(6);
  for (int64_t t = 0; t < 5; ++t) {
    if (t == 0 || t == 3) writer.begin_sequence();
    for (int l = 0; l < 2; ++l)
      for (int e = 0; e < 3; ++e) {
        scores[static_cast<size_t>(l * 3 + e)] = value(t, l, e, 0.5f);
        pregate[static_cast<size_t>(l * 3 + e)] = value(t, l, e, 0.25f);
        weight_scores[static_cast<size_t>(l * 3 + e)] = value(t, l, e, 0.125f);
      }
    writer.append_step(static_cast<int32_t>(7 + t), scores, pregate,
                       weights ? weight_scores : std::vector<float>{});
  }
  writer.close();
}

TEST(TraceFolder, WriterAndReaderRoundTrip) {
  ScratchDir dir;
  TraceMeta meta = small_meta();
  meta.policy = "psr:lambda=0.3,n=1";
  meta.cache_slots = 2;
  meta.expert_bytes = 1234;
  meta.vocab = 100;
  meta.extra["note"] = "kept";
  write_small_trace(dir.path(), true, meta);

  const Trace trace = Trace::open(dir.path());
  EXPECT_EQ(trace.steps(), 5);
  EXPECT_EQ(trace.layers(), 2);
  EXPECT_EQ(trace.experts(), 3);
  EXPECT_EQ(trace.sequence_starts(), (std::vector<int64_t>{0, 3}));
  ASSERT_TRUE(trace.has_weights_scores());
  for (int64_t t = 0; t < 5; ++t) {
    EXPECT_EQ(trace.token(t), 7 + t);
    for (int l = 0; l < 2; ++l)
      for (int e = 0; e < 3; ++e) {
        EXPECT_EQ(trace.scores(t, l)[static_cast<size_t>(e)], value(t, l, e, 0.5f));
        EXPECT_EQ(trace.pregate(t, l)[static_cast<size_t>(e)], value(t, l, e, 0.25f));
        EXPECT_EQ(trace.weights_scores(t, l)[static_cast<size_t>(e)], value(t, l, e, 0.125f));
      }
  }
  const TraceMeta& back = trace.meta();
  EXPECT_EQ(back.moe_layer_ids, (std::vector<int>{1, 3}));
  EXPECT_EQ(back.model, "tiny");
  EXPECT_EQ(back.policy, std::optional<std::string>("psr:lambda=0.3,n=1"));
  EXPECT_EQ(back.cache_slots, std::optional<int>(2));
  EXPECT_EQ(back.expert_bytes, std::optional<uint64_t>(1234));
  EXPECT_EQ(back.vocab, 100);
  EXPECT_EQ(back.extra.at("note"), "kept");
  EXPECT_EQ(back.router_spec().experts, 3);
  EXPECT_EQ(back.router_spec().mode, policy::ScoreMode::kSoftmax);
}

// A token past meta.json's vocabulary is refused where it is appended (Trace::open would refuse
// the trace), naming the step; nothing is left under the trace's name.
TEST(TraceFolder, WriterRefusesATokenPastTheVocabulary) {
  ScratchDir dir;
  TraceMeta meta = small_meta();
  meta.vocab = 10;
  const std::vector<float> row(6, 0.5f);
  {
    TraceWriter writer(dir / "t", meta, false);
    writer.append_step(9, row, row, {});
    EXPECT_ERROR_MENTIONS(writer.append_step(10, row, row, {}), "tokens", "vocab of 10",
                          "found 10 at step 1");
  }
  EXPECT_FALSE(std::filesystem::exists(dir / "t"));
}

TEST(TraceFolder, RewritingWithoutWeightsRemovesTheStaleFile) {
  ScratchDir dir;
  write_small_trace(dir.path(), true);
  write_small_trace(dir.path(), false);
  EXPECT_FALSE(Trace::open(dir.path()).has_weights_scores());
}

// What numpy users write: int64 tokens (numpy's default), no sequences.npy, minimal meta.
TEST(TraceFolder, ReadsANumpyStyleTrace) {
  ScratchDir dir;
  write_text(dir / "meta.json", R"({"layers": 1, "experts": 2, "top_k": 1, "router": "sigmoid"})");
  const std::vector<int64_t> tokens = {5, 6, 7};
  const uint64_t t_shape[] = {3}, s_shape[] = {3, 1, 2};
  write_npy<int64_t>(dir / "tokens.npy", tokens, t_shape);
  const std::vector<float> scores = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f};
  write_npy<float>(dir / "scores.npy", scores, s_shape);
  write_npy<float>(dir / "pregate.npy", scores, s_shape);
  const Trace trace = Trace::open(dir.path());
  EXPECT_EQ(trace.steps(), 3);
  EXPECT_EQ(trace.token(2), 7);
  EXPECT_EQ(trace.sequence_starts(), (std::vector<int64_t>{0}));
  EXPECT_FALSE(trace.has_weights_scores());
  EXPECT_TRUE(trace.weights_scores(0, 0).empty());
  EXPECT_EQ(trace.meta().moe_layer_ids, (std::vector<int>{0}));
  EXPECT_EQ(trace.meta().router_spec().mode, policy::ScoreMode::kSigmoid);
}

void overwrite_scores(const std::filesystem::path& dir, const char* file, size_t index, float v) {
  const NpyArray array = NpyArray::open(dir / file, {DType::kF32});
  std::vector<float> values(array.values<float>().begin(), array.values<float>().end());
  values[index] = v;
  write_npy<float>(dir / file, values, array.shape());
}

TEST(TraceFolder, RejectsNanAndInfNamingFileAndIndex) {
  ScratchDir dir;
  write_small_trace(dir.path(), true);
  // (t, l, e) = (1, 0, 2) is flat index (1 * 2 + 0) * 3 + 2 = 8.
  overwrite_scores(dir.path(), "scores.npy", 8, std::numeric_limits<float>::quiet_NaN());
  EXPECT_ERROR_MENTIONS(Trace::open(dir.path()), "scores.npy", "(t, l, e) = (1, 0, 2)", "finite",
                        "nan");
  overwrite_scores(dir.path(), "scores.npy", 8, 1.0f);
  overwrite_scores(dir.path(), "pregate.npy", 29, -std::numeric_limits<float>::infinity());
  EXPECT_ERROR_MENTIONS(Trace::open(dir.path()), "pregate.npy", "(t, l, e) = (4, 1, 2)", "finite",
                        "inf");
  overwrite_scores(dir.path(), "pregate.npy", 29, 1.0f);
  overwrite_scores(dir.path(), "weights_scores.npy", 0, std::numeric_limits<float>::infinity());
  EXPECT_ERROR_MENTIONS(Trace::open(dir.path()), "weights_scores.npy", "(t, l, e) = (0, 0, 0)");
  TraceOpenOptions unchecked;
  unchecked.check_finite = false;
  EXPECT_NO_THROW(Trace::open(dir.path(), unchecked));
}

TEST(TraceFolder, RejectsShapesThatDisagreeWithMeta) {
  ScratchDir dir;
  write_small_trace(dir.path(), false);
  const std::vector<float> wrong(5 * 2 * 4, 0.0f);
  const uint64_t wrong_shape[] = {5, 2, 4};
  write_npy<float>(dir / "pregate.npy", wrong, wrong_shape);
  EXPECT_ERROR_MENTIONS(Trace::open(dir.path()), "pregate.npy", "shape", "[T, L, E] = [5, 2, 3]",
                        "found [5, 2, 4]");
  const std::vector<float> fewer(4 * 2 * 3, 0.0f);
  const uint64_t fewer_shape[] = {4, 2, 3};
  write_npy<float>(dir / "pregate.npy", fewer, fewer_shape);
  EXPECT_ERROR_MENTIONS(Trace::open(dir.path()), "pregate.npy", "[5, 2, 3]", "found [4, 2, 3]");
}

TEST(TraceFolder, RejectsTruncatedAndWrongDtypeFiles) {
  ScratchDir dir;
  write_small_trace(dir.path(), false);
  std::vector<uint8_t> bytes = testing::read_bytes(dir / "scores.npy");
  bytes.resize(bytes.size() - 3);
  testing::write_bytes(dir / "scores.npy", bytes);
  EXPECT_ERROR_MENTIONS(Trace::open(dir.path()), "scores.npy", "truncated");
  write_small_trace(dir.path(), false);
  const std::vector<int32_t> ints(5 * 2 * 3, 1);
  const uint64_t shape[] = {5, 2, 3};
  write_npy<int32_t>(dir / "scores.npy", ints, shape);
  EXPECT_ERROR_MENTIONS(Trace::open(dir.path()), "scores.npy", "descr", "'<f4'", "'<i4'");
}

TEST(TraceFolder, RejectsBadTokensAndSequences) {
  ScratchDir dir;
  write_small_trace(dir.path(), false);
  const uint64_t five[] = {5};
  write_npy<int32_t>(dir / "tokens.npy", std::vector<int32_t>{1, 2, -4, 3, 3}, five);
  EXPECT_ERROR_MENTIONS(Trace::open(dir.path()), "tokens.npy", "token 2", "found -4");
  write_npy<int32_t>(dir / "tokens.npy", std::vector<int32_t>{1, 2, 3, 4, 5}, five);

  const std::pair<std::vector<int64_t>, const char*> bad[] = {
      {{1, 3}, "start at step 0"},
      {{0, 3, 3}, "strictly increasing"},
      {{0, 2, 1}, "strictly increasing"},
      {{0, 5}, "[0, 5)"},
  };
  for (const auto& [starts, expected] : bad) {
    const uint64_t n[] = {starts.size()};
    write_npy<int64_t>(dir / "sequences.npy", starts, n);
    EXPECT_ERROR_MENTIONS(Trace::open(dir.path()), "sequences.npy", expected);
  }
  const uint64_t two_d[] = {1, 2};
  write_npy<int64_t>(dir / "sequences.npy", std::vector<int64_t>{0, 2}, two_d);
  EXPECT_ERROR_MENTIONS(Trace::open(dir.path()), "sequences.npy", "shape", "[S]");
}

TEST(TraceFolder, RejectsTokensOutsideTheDeclaredVocab) {
  ScratchDir dir;
  write_small_trace(dir.path(), false);  // tokens 7..11 (the writer refuses them under vocab 10)
  std::ifstream in(dir / "meta.json");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  text.replace(text.find('{'), 1, "{\"vocab\": 10, ");
  write_text(dir / "meta.json", text);
  EXPECT_ERROR_MENTIONS(Trace::open(dir.path()), "tokens.npy", "token 3", "[0, 10)", "found 10");
}

TEST(TraceFolder, RejectsBadMetaJson) {
  const std::pair<const char*, std::vector<const char*>> cases[] = {
      {R"({"layers": 2, "experts": 3,)", {"json", "expected valid JSON"}},
      {R"([1, 2])", {"meta", "JSON object"}},
      {R"({"experts": 3, "top_k": 2, "router": "softmax"})", {"layers", "missing"}},
      {R"({"layers": "2", "experts": 3, "top_k": 2, "router": "softmax"})", {"layers", "integer"}},
      {R"({"layers": 2, "experts": 3, "top_k": 4, "router": "softmax"})",
       {"top_k", "[1, 3]", "found 4"}},
      {R"({"layers": 2, "experts": 3, "top_k": 2, "router": "relu"})",
       {"router", "\"softmax\" or \"sigmoid\""}},
      {R"({"layers": 2, "experts": 3, "top_k": 2, "router": "softmax", "moe_layer_ids": [0]})",
       {"moe_layer_ids", "2 layer indices"}},
      {R"({"layers": 2, "experts": 3, "top_k": 2, "router": "softmax", "tokens_file": "../x.npy"})",
       {"tokens_file", "inside the trace folder"}},
      {R"({"layers": 2, "experts": 4, "top_k": 2, "router": "softmax", "n_group": 3})",
       {"n_group", "divisor"}},
      {R"({"layers": 2, "experts": 3, "top_k": 2, "router": "softmax", "policy": 3})",
       {"policy", "policy string"}},
      {R"({"layers": 2, "experts": 3, "top_k": 2, "router": "softmax", "routed_scaling_factor": -1})",
       {"routed_scaling_factor", "positive"}},
      {R"({"layers": 2, "experts": 3, "top_k": 2, "router": "softmax", "routed_scaling_factor": 1e300})",
       {"routed_scaling_factor", "finite"}},
      {R"({"layers": 2, "experts": 3, "top_k": 2, "router": "softmax", "window": 4})",
       {"window", "[1, 3]"}},
      // A number beyond double range is nlohmann's out_of_range, not a parse_error (found by
      // fuzz_npy): it must still be a clean "expected valid JSON" error.
      {R"({"layers": 1e777, "experts": 3, "top_k": 2, "router": "softmax"})",
       {"json", "expected valid JSON"}},
  };
  for (const auto& entry : cases) {
    // Named copies: clang 14 cannot capture structured bindings in a lambda.
    const char* text = entry.first;
    const std::vector<const char*>& pieces = entry.second;
    SCOPED_TRACE(text);
    const std::string message = testing::error_of([&] { parse_trace_meta(text, "dir/meta.json"); });
    EXPECT_THAT(message, ::testing::HasSubstr("dir/meta.json"));
    for (const char* piece : pieces) EXPECT_THAT(message, ::testing::HasSubstr(piece));
  }
}

TEST(TraceFolder, MissingFolderOrFilesAreNamed) {
  ScratchDir dir;
  EXPECT_ERROR_MENTIONS(Trace::open(dir / "absent"), "absent", "trace folder");
  EXPECT_ERROR_MENTIONS(Trace::open(dir.path()), "meta.json");
  write_small_trace(dir.path(), false);
  std::filesystem::remove(dir / "pregate.npy");
  EXPECT_ERROR_MENTIONS(Trace::open(dir.path()), "pregate.npy", "open");
}

}  // namespace
}  // namespace steermoe::trace
