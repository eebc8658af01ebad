// The engine's commands, run as the built binary: logits match the oracle, run generates,
// trace writes a trace folder, perplexity prints JSON, errors exit non-zero with a message.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "../cli_runner.hpp"
#include "../f32_file.hpp"
#include "../json_test_util.hpp"

namespace steermoe::engine {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::HasSubstr;

const fs::path kOracle = fs::path(STEERMOE_ORACLE_DIR);

using Result = steermoe::test_support::CliResult;
Result run(const std::string& args) { return steermoe::test_support::run_cli(args); }

using test_support::read_f32;

std::string token_list(const std::string& model) {
  std::ifstream in(kOracle / model / "tokens.json");
  const auto ids =
      steermoe::test_support::parse_json_stream(in).at("tokens").get<std::vector<int>>();
  std::string s;
  for (int id : ids) {
    if (!s.empty()) s += ',';
    s += std::to_string(id);
  }
  return s;
}

fs::path temp(const std::string& name) {
  return fs::path(testing::TempDir()) / name;
}

TEST(Cli, LogitsMatchOracle) {
  for (const std::string variant : {"model.gguf", "hf"}) {
    for (const std::string mode : {"", " --batched"}) {
      SCOPED_TRACE(variant + mode);
      const fs::path out = temp("logits.bin");
      const Result r =
          run("logits -m " + (kOracle / "deepseek2_v3" / variant).string() + " --tokens " +
              token_list("deepseek2_v3") + " -o " + out.string() + mode);
      ASSERT_EQ(r.status, 0) << r.output;
      const std::vector<float> got = read_f32(out);
      const std::vector<float> want = read_f32(kOracle / "deepseek2_v3" / "logits.bin");
      ASSERT_EQ(got.size(), want.size());
      float max_diff = 0.0f;
      for (size_t i = 0; i < got.size(); ++i)
        max_diff = std::max(max_diff, std::fabs(got[i] - want[i]));
      EXPECT_LE(max_diff, 1e-4f);
    }
  }
}

TEST(Cli, LogitsRejectsBadTokens) {
  Result r = run("logits -m " + (kOracle / "olmoe" / "model.gguf").string() + " --tokens 1,x -o " +
                 temp("x.bin").string());
  EXPECT_NE(r.status, 0);
  EXPECT_THAT(r.output, HasSubstr("--tokens: item 1: expected a token id"));
  r = run("logits -m " + (kOracle / "olmoe" / "model.gguf").string() + " --tokens 1,300 -o " +
          temp("x.bin").string());
  EXPECT_NE(r.status, 0);
  EXPECT_THAT(r.output, HasSubstr("expected a token id in [0, 300)"));
}

TEST(Cli, RunGeneratesAndReportsSpeed) {
  const Result r = run("run -m " + (kOracle / "olmoe" / "model.gguf").string() +
                       " -p 'the cat' -n 8 --ignore-eos -t 2");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("the cat"));
  EXPECT_THAT(r.output, HasSubstr("prompt:"));
  EXPECT_THAT(r.output, HasSubstr("decode: 7 tokens"));
  EXPECT_THAT(r.output, HasSubstr("8 generated"));
  // A cache smaller than every expert on the resident link: the copies an offloading link would
  // make are reported, the same as the disk link makes (it printed none).
  const fs::path small = fs::path(STEERMOE_SOURCE_DIR) / "models" / "steer-olmoe-small";
  const std::string cached = "run -m " + small.string() +
                             " -p 'hello world' -n 16 --temp 0 --residency 0.5 --policy "
                             "psr:lambda=0.3,n=1 --link ";
  const Result resident = run(cached + "resident"), disk = run(cached + "disk");
  ASSERT_EQ(resident.status, 0) << resident.output;
  ASSERT_EQ(disk.status, 0) << disk.output;
  const auto per_token = [](const std::string& out, const std::string& before) {
    const size_t at = out.find(before);
    return at == std::string::npos
               ? std::string("missing")
               : out.substr(at + before.size(), out.find(" prefetch", at) - at - before.size());
  };
  EXPECT_EQ(per_token(resident.output, "an offloading link would copy "),
            per_token(disk.output, "copies/token: "))
      << resident.output << disk.output;
  // Seeded sampling is reproducible.
  const std::string sampled = "run -m " + (kOracle / "olmoe" / "model.gguf").string() +
                              " -p 'the' -n 12 --ignore-eos --temp 0.8 --top-p 0.9 --seed 5";
  const Result a = run(sampled), b = run(sampled);
  ASSERT_EQ(a.status, 0) << a.output;
  EXPECT_EQ(a.output.substr(0, a.output.find("prompt:")),
            b.output.substr(0, b.output.find("prompt:")));
}

TEST(Cli, MissingModelFailsWithMessage) {
  const Result r = run("run -m /nonexistent/model.gguf -p hi -n 1");
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.output, HasSubstr("/nonexistent/model.gguf"));
}

TEST(Cli, TraceWritesTraceFolder) {
  const fs::path text = temp("text.txt");
  std::ofstream(text) << "the quick brown fox jumps over the lazy dog, then the dog sleeps.";
  const fs::path dir = temp("trace_ds");
  fs::remove_all(dir);
  const Result r = run("trace -m " + (kOracle / "deepseek2_v3" / "model.gguf").string() + " -f " +
                       text.string() + " -o " + dir.string() + " --window 16");
  ASSERT_EQ(r.status, 0) << r.output;
  std::ifstream meta_in(dir / "meta.json");
  const json meta = steermoe::test_support::parse_json_stream(meta_in);
  EXPECT_EQ(meta.at("layers"), 3);
  EXPECT_EQ(meta.at("experts"), 16);
  EXPECT_EQ(meta.at("router"), "sigmoid");
  EXPECT_EQ(meta.at("moe_layer_ids"), json::array({1, 2, 3}));
  EXPECT_TRUE(fs::exists(dir / "scores.npy"));
  EXPECT_TRUE(fs::exists(dir / "pregate.npy"));
  EXPECT_TRUE(fs::exists(dir / "weights_scores.npy"));
  EXPECT_TRUE(fs::exists(dir / "sequences.npy"));  // more than 16 tokens: several sequences
}

TEST(Cli, PerplexityPrintsJson) {
  const fs::path text = temp("ppl.txt");
  std::ofstream(text) << "the cat sat on the mat and the dog sat on the log. the end.";
  const Result r = run("perplexity -m " + (kOracle / "qwen3moe" / "model.gguf").string() + " -f " +
                       text.string() + " --window 16");
  ASSERT_EQ(r.status, 0) << r.output;
  const json j = steermoe::parse_json_or_throw(r.output.substr(r.output.find('{')));
  EXPECT_GT(j.at("windows").get<int>(), 1);
  const double ppl = j.at("perplexity").get<double>();
  EXPECT_GT(ppl, 1.0);
  EXPECT_LT(ppl, 3000.0);  // a random model is near uniform over 300 tokens, not worse by 10x
  EXPECT_NEAR(std::log(ppl), j.at("nll").get<double>(), 1e-9);
}

// score splits a request as lm-eval does (context tokens, then the rest of the whole string's).
// When the continuation's text merges into the context's last token ("**" + "**" is one token
// of the default model's BPE), it has no token of its own: lm-eval scores that 0 and greedy,
// and so must score (it used to stop with an error, which broke lm-eval's check on such data).
TEST(Cli, ScoreContinuationMergedIntoTheContextIsZeroLikeLmEval) {
  const std::string model =
      (fs::path(STEERMOE_SOURCE_DIR) / "models" / "steer-olmoe-small").string();
  const Result merged = run("tokenize -m " + model + " --text '****'");
  ASSERT_EQ(merged.status, 0) << merged.output;
  const Result half = run("tokenize -m " + model + " --text '**'");
  ASSERT_EQ(half.status, 0) << half.output;
  // The premise: "****" is no more tokens than "**" (else the case below would not arise).
  ASSERT_LE(steermoe::parse_json_or_throw(merged.output).size(),
            steermoe::parse_json_or_throw(half.output).size())
      << merged.output;
  const fs::path requests = temp("score_merged.jsonl");
  std::ofstream(requests)
      << steermoe::dump_json(json{{"context", "a line\n**"}, {"continuation", "**"}}) << "\n"
      << steermoe::dump_json(json{{"context", "a line\n"}, {"continuation", "of text"}}) << "\n";
  const Result r = run("score -m " + model + " -f " + requests.string());
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("adds no token"));
  std::vector<json> rows;
  std::istringstream lines(r.output);
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty() && line[0] == '{') rows.push_back(steermoe::parse_json_or_throw(line));
  }
  ASSERT_EQ(rows.size(), 2u) << r.output;
  EXPECT_EQ(rows[0].at("tokens").get<int>(), 0);
  EXPECT_EQ(rows[0].at("loglikelihood").get<double>(), 0.0);
  EXPECT_TRUE(rows[0].at("is_greedy").get<bool>());
  EXPECT_GT(rows[1].at("tokens").get<int>(), 0);
  EXPECT_LT(rows[1].at("loglikelihood").get<double>(), 0.0);
}

// The closed loop from the command line: trace -> calibrate -> perplexity under a cache-aware
// policy with a small cache; the routing change moves the perplexity.
TEST(Cli, PerplexityUnderACacheAwarePolicy) {
  const fs::path text = temp("heldout.txt");
  std::ofstream(text) << "the cat sat on the mat and the dog sat on the log. then the cat ran to "
                         "the dog and the dog ran to the cat, and the end came.";
  const std::string model = (kOracle / "olmoe" / "model.gguf").string();
  const fs::path dir = temp("trace_calib");
  fs::remove_all(dir);
  ASSERT_EQ(run("trace -m " + model + " -f " + text.string() + " -o " + dir.string()).status, 0);
  const fs::path calib = temp("c.smcal");
  const Result c = run("calibrate --trace " + dir.string() + " -o " + calib.string());
  ASSERT_EQ(c.status, 0) << c.output;
  const Result exact = run("perplexity -m " + model + " -f " + text.string() + " --window 32");
  const Result psr =
      run("perplexity -m " + model + " -f " + text.string() +
          " --window 32 --policy psr:lambda=1,n=1 --cache 6 --calib " + calib.string());
  ASSERT_EQ(exact.status, 0) << exact.output;
  ASSERT_EQ(psr.status, 0) << psr.output;
  const json je = steermoe::parse_json_or_throw(exact.output.substr(exact.output.find('{')));
  const json jp = steermoe::parse_json_or_throw(psr.output.substr(psr.output.find('{')));
  EXPECT_EQ(jp.at("cache"), 6);
  EXPECT_NE(je.at("nll").get<double>(), jp.at("nll").get<double>());
  // A calibration of another model's shape is rejected, naming the file.
  const Result bad =
      run("perplexity -m " + (kOracle / "deepseek2_moonlight" / "model.gguf").string() + " -f " +
          text.string() + " --policy psr:lambda=1,n=1 --cache 6 --calib " + calib.string());
  EXPECT_NE(bad.status, 0);
  EXPECT_THAT(bad.output, HasSubstr(calib.string() + ": layers/experts/top_k"));

  // A trace recorded under the cache-aware policy is its own closed loop: replaying it under the
  // same policy and cache reproduces the decisions the engine made, and meta.json says so.
  const fs::path closed = temp("trace_closed");
  fs::remove_all(closed);
  const Result rec =
      run("trace -m " + model + " -f " + text.string() + " -o " + closed.string() +
          " --window 32 --policy psr:lambda=1,n=1 --cache 6 --calib " + calib.string());
  ASSERT_EQ(rec.status, 0) << rec.output;
  std::ifstream meta_in(closed / "meta.json");
  const json meta = steermoe::test_support::parse_json_stream(meta_in);
  EXPECT_EQ(meta.at("policy"), "psr:lambda=1,n=1");
  EXPECT_EQ(meta.at("cache_slots"), 6);
  const Result rep = run("replay --trace " + closed.string() + " --calib " + calib.string() +
                         " --policy psr:lambda=1,n=1 --cache 6");
  ASSERT_EQ(rep.status, 0) << rep.output;
  EXPECT_THAT(rep.output, HasSubstr("\"loop\":\"closed\""));
}

}  // namespace
}  // namespace steermoe::engine
