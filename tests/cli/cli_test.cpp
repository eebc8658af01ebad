// The CLI as a user meets it, through the built binary: `run`'s sampling defaults (llama-cli's)
// keep the shipped small model from looping where greedy decoding does; every output path
// reports a failed write (a full device) with exit status 1 and the file's name.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "../cli_runner.hpp"
#include "common/json_input.hpp"
#include "common/memory_limit.hpp"

namespace steermoe {
namespace {

namespace fs = std::filesystem;
using test_support::run_cli;

const fs::path kSmall = fs::path(STEERMOE_SOURCE_DIR) / "models" / "steer-olmoe-small";

// The most times one non-blank line of `text` occurs.
int most_repeated_line(const std::string& text) {
  std::map<std::string, int> seen;
  std::istringstream in(text);
  int most = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    most = std::max(most, ++seen[line]);
  }
  return most;
}

// The demo's command (scripts/setup-and-demo.sh) with the resident link: the text is the same
// on every link.
std::string demo(const std::string& extra) {
  const auto r = run_cli("run -m " + kSmall.string() + " -p 'def read_config(path):' -n 64 " +
                         "--policy psr:lambda=0.3,n=1 --residency 0.5 --link resident --calib " +
                         (kSmall / "calib.smcal").string() + " " + extra);
  EXPECT_EQ(r.status, 0) << r.output;
  return r.output.substr(0, r.output.find("\nprompt: "));  // the text, not the speed report
}

TEST(CliRun, DefaultSamplingDoesNotLoopWhereGreedyDoes) {
  const std::string greedy = demo("--temp 0");
  EXPECT_GE(most_repeated_line(greedy), 4) << "greedy decoding of this prompt loops:\n" << greedy;
  for (int seed = 0; seed < 4; ++seed) {
    const std::string sampled = demo("--seed " + std::to_string(seed));
    EXPECT_LE(most_repeated_line(sampled), 2) << "seed " << seed << ":\n" << sampled;
    EXPECT_EQ(sampled, demo("--seed " + std::to_string(seed))) << "the same seed, the same text";
  }
  // --temp 0 is the model's argmax: the default repeat penalty does not apply to it ...
  EXPECT_EQ(greedy, demo("--temp 0 --repeat-penalty 1"));
  // ... unless asked for.
  EXPECT_NE(greedy, demo("--temp 0 --repeat-penalty 1.3"));
}

// --prefill-batch sets the prompt's step (reported) without changing the text; out of range is
// an error naming the option.
TEST(CliRun, PrefillBatchSetsThePromptStep) {
  const std::string base =
      "run -m " + kSmall.string() + " -p 'def read_config(path):' -n 16 --temp 0 --link resident";
  const auto deflt = run_cli(base);
  ASSERT_EQ(deflt.status, 0) << deflt.output;
  EXPECT_NE(deflt.output.find("steps of 128)"), std::string::npos) << deflt.output;
  const auto three = run_cli(base + " --prefill-batch 3");
  ASSERT_EQ(three.status, 0) << three.output;
  EXPECT_NE(three.output.find("steps of 3)"), std::string::npos) << three.output;
  const auto text = [](const std::string& out) { return out.substr(0, out.find("\nprompt: ")); };
  EXPECT_EQ(text(three.output), text(deflt.output));
  const auto zero = run_cli(base + " --prefill-batch 0");
  EXPECT_NE(zero.status, 0);
  EXPECT_NE(zero.output.find("--prefill-batch"), std::string::npos) << zero.output;
}

TEST(CliRun, HelpStatesTheSamplingDefaults) {
  const auto r = run_cli("run --help");
  ASSERT_EQ(r.status, 0);
  for (const char* flag :
       {"--temp FLOAT:FLOAT in [0 - 100]=0.8", "--top-k INT:INT in [0 - 16777216]=40",
        "--top-p FLOAT:FLOAT in (0 - 1]=0.95", "--min-p FLOAT:FLOAT in [0 - 1]=0.05",
        "--repeat-penalty FLOAT:FLOAT in [0.01 - 10]=1.1",
        "--repeat-last-n INT:INT in [-1 - 16777216]=64"}) {
    EXPECT_NE(r.output.find(flag), std::string::npos) << flag << "\n" << r.output;
  }
}

// Every command's help shows real defaults: no "=[]" for a required list, --draft's synthetic
// form only where the text is teacher forced, the handler threads as the number they are.
TEST(CliHelp, DefaultsShownAreTheOnesUsed) {
  for (const char* command : {"run", "serve", "bench", "kl", "sweep", "score", "trace",
                              "perplexity", "logits", "profile", "sim", "calibrate"}) {
    const auto r = run_cli(std::string(command) + " --help");
    ASSERT_EQ(r.status, 0) << command;
    EXPECT_EQ(r.output.find("=[]"), std::string::npos) << command << "\n" << r.output;
    const bool synthetic = r.output.find("synthetic:A") != std::string::npos;
    EXPECT_EQ(synthetic, std::string(command) == "bench" || std::string(command) == "kl" ||
                             std::string(command) == "score")
        << command;
  }
  EXPECT_NE(run_cli("serve --help").output.find("--http-threads INT:INT in [0 - 256]=2"),
            std::string::npos);
  EXPECT_NE(run_cli("run --help").output.find("MODEL.smcal beside a .gguf"), std::string::npos);
}

// Speculative decoding through `run`: greedy verification commits the target's greedy tokens,
// so with the logical caches rolled back to the committed positions the text equals plain greedy
// decoding's under the same PSR policy, whatever the drafts and k.
TEST(CliRun, DraftAtTemperatureZeroGivesTheGreedyText) {
  const std::string drafter =
      (fs::path(STEERMOE_SOURCE_DIR) / "models" / "steer-drafter-small").string();
  const std::string greedy = demo("--temp 0");
  for (const char* spec :
       {"--draft-k 4 --spec-select rollback", "--draft-k 7 --spec-select rollback",
        "--draft-k 4" /* the default rule: rollback, so the text is the greedy text */}) {
    const auto r =
        run_cli("run -m " + kSmall.string() + " -p 'def read_config(path):' -n 64 " +
                "--policy psr:lambda=0.3,n=1 --residency 0.5 --link resident --calib " +
                (kSmall / "calib.smcal").string() + " --temp 0 --draft " + drafter + " " + spec);
    ASSERT_EQ(r.status, 0) << r.output;
    EXPECT_EQ(r.output.substr(0, r.output.find("\nprompt: ")), greedy) << spec;
    EXPECT_NE(r.output.find("speculative: tau "), std::string::npos) << r.output;
  }
  // AcceptMoE's block sets route the verification differently: it runs, and copies are counted.
  const auto block = run_cli("run -m " + kSmall.string() + " -p 'def read_config(path):' -n 32 " +
                             "--residency 0.5 --link resident --temp 0 --draft " + drafter +
                             " --spec-select block");
  ASSERT_EQ(block.status, 0) << block.output;
  EXPECT_NE(block.output.find(" block + 0.00 restore; stall"), std::string::npos) << block.output;
  // The sampling filters would change the distribution speculative sampling keeps: refused.
  const auto refused =
      run_cli("run -m " + kSmall.string() + " -p x -n 4 --top-k 5 --draft " + drafter);
  EXPECT_EQ(refused.status, 1) << refused.output;
  EXPECT_NE(refused.output.find("--top-k"), std::string::npos) << refused.output;
  // A residency below the top-k is raised to it, and said.
  const auto low = run_cli("run -m " + kSmall.string() + " -p x -n 2 --residency 0.1");
  EXPECT_EQ(low.status, 0) << low.output;
  EXPECT_NE(low.output.find("--residency 0.1 is 6 of 64 experts per layer; the cache holds at "
                            "least the top-k: 8"),
            std::string::npos)
      << low.output;
  // Verification options that would change nothing are said, not silently ignored.
  const auto alone = run_cli("run -m " + kSmall.string() + " -p x -n 2 --spec-select block");
  EXPECT_EQ(alone.status, 0) << alone.output;
  EXPECT_NE(alone.output.find("have no effect without --draft"), std::string::npos) << alone.output;
  const auto pool = run_cli("run -m " + kSmall.string() + " -p x -n 2 --pool 16 --draft " +
                            drafter + " --spec-select rollback");
  EXPECT_EQ(pool.status, 0) << pool.output;
  EXPECT_NE(pool.output.find("no effect with --spec-select rollback"), std::string::npos)
      << pool.output;
  EXPECT_EQ(demo("--temp 0").find("no effect"), std::string::npos);
}

// A drafter whose tokenizer spells its ids differently drafts nonsense (every draft rejected):
// refused, naming --draft and what differs. steer-olmoe-tiny has the vocabulary size of the
// small model but another tokenizer.
TEST(CliRun, ADrafterWithAnotherTokenizerIsRefused) {
  const std::string other =
      (fs::path(STEERMOE_SOURCE_DIR) / "models" / "steer-olmoe-tiny").string();
  const auto r = run_cli("run -m " + kSmall.string() + " -p x -n 4 --temp 0 --draft " + other);
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("--draft"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("tokenizer"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("spell differently"), std::string::npos) << r.output;
}

// -c beyond the positions the model was trained on (256 for the shipped model): a warning, as
// llama.cpp gives; within them none.
TEST(CliRun, AContextBeyondTheTrainedOneWarns) {
  const std::string base = "run -m " + kSmall.string() + " -p x -n 1 --temp 0";
  const auto beyond = run_cli(base + " -c 512");
  EXPECT_EQ(beyond.status, 0) << beyond.output;
  EXPECT_NE(beyond.output.find("-c 512 is beyond the 256 positions"), std::string::npos)
      << beyond.output;
  const auto within = run_cli(base + " -c 256");
  EXPECT_EQ(within.status, 0) << within.output;
  EXPECT_EQ(within.output.find("beyond"), std::string::npos) << within.output;
  // perplexity's windows alike (its default, 512, is past this model's 256).
  const auto ppl =
      run_cli("perplexity -m " + kSmall.string() + " -f " +
              (fs::path(STEERMOE_SOURCE_DIR) / "data" / "text-small" / "eval.txt").string() +
              " --window 300 --max-windows 1");
  EXPECT_EQ(ppl.status, 0) << ppl.output;
  EXPECT_NE(ppl.output.find("--window 300 is beyond the 256 positions"), std::string::npos)
      << ppl.output;
}

// What the command line did not understand is named: an unknown command, an unknown option
// (before "--model is required", which CLI11 would say first), values outside an option's range
// that the help states, and a policy that cannot run on the link asked for, before any text.
TEST(CliErrors, WhatWasNotUnderstoodIsNamedUpFront) {
  struct Case {
    std::string args, expected;
  };
  const std::string m = "-m " + kSmall.string() + " -p hi -n 2";
  const Case cases[] = {
      {"foo", "unknown command 'foo'"},
      {"bench -m " + kSmall.string() + " --scores-from /nonexistent --generate 4",
       "--scores-from: expected teacher forcing over the trace's tokens, not --generate"},
      {"--bogus", "unknown option '--bogus'"},
      {"run --bogus-opt 1", "unknown option '--bogus-opt' for `steermoe run`"},
      {"run -m " + kSmall.string() + " --modle x -p hi",
       "unknown option '--modle' for `steermoe run`; did you mean --model?"},
      // The closest names are offered: a typo, and kl's / perplexity's spellings of one idea.
      {"benhc", "unknown command 'benhc'; did you mean bench?"},
      {"kl --window 64", "did you mean --window-len?"},
      {"perplexity --window-len 64", "did you mean --window?"},
      {"bench --window 64", "did you mean --windows or --window-len?"},
      {"run " + m + " --residency 0", "--residency"},
      {"run " + m + " --top-p 0", "--top-p"},
      {"run " + m + " --residency 0.5 --policy physical:psr:lambda=0.3",
       "the physical: demonstration mode routes on the copies"},
      {"run " + m + " --residency 0.5 --link sim:no-such-profile", "--link sim:PROFILE"},
      // Given but empty is not "no budget"; hexadecimal is not a byte count.
      {"run " + m + " --mem-limit ''", "--mem-limit: expected a byte count"},
      {"run " + m + " --mem-limit 0x80000000", "found '0x80000000'"},
  };
  // Two letters are two edits from `kl`: no suggestion for them.
  EXPECT_EQ(run_cli("xx").output.find("did you mean"), std::string::npos);
  for (const Case& c : cases) {
    const auto r = run_cli(c.args);
    EXPECT_EQ(r.status, 1) << c.args << ": " << r.output;
    EXPECT_NE(r.output.find(c.expected), std::string::npos) << c.args << ": " << r.output;
    EXPECT_EQ(r.output.find("is required"), std::string::npos) << c.args << ": " << r.output;
  }
  // serve takes -q as run does; a chat template it cannot render is named by its file.
  EXPECT_NE(run_cli("serve --help").output.find("-q,--quiet"), std::string::npos);
  const fs::path bad = fs::temp_directory_path() / "steermoe_cli_bad_template.jinja";
  { std::ofstream(bad) << "{% if %}"; }
  const auto t =
      run_cli("serve -m " + kSmall.string() + " --port 0 --chat-template " + bad.string());
  EXPECT_EQ(t.status, 1) << t.output;
  EXPECT_NE(t.output.find(bad.string() + ": chat_template"), std::string::npos) << t.output;
  fs::remove(bad);
  // serve --draft on a model whose recurrent layers cannot be rolled back: refused at startup
  // (it started, then failed every speculative request).
  const fs::path hybrid =
      fs::path(STEERMOE_SOURCE_DIR) / "tests" / "data" / "hf_models" / "qwen3_next";
  const auto h = run_cli("serve -m " + hybrid.string() + " --port 0 --draft " +
                         (kSmall.parent_path() / "steer-drafter-small").string());
  EXPECT_EQ(h.status, 1) << h.output;
  EXPECT_NE(h.output.find("recurrent (Gated DeltaNet) layers"), std::string::npos) << h.output;
  // calibrate's report cache: at most the trace's experts per layer.
  const fs::path trace = fs::temp_directory_path() / "steermoe_cli_calibrate_trace";
  fs::remove_all(trace);
  ASSERT_EQ(run_cli("trace-synth --shape olmoe --tokens 16 -o " + trace.string()).status, 0);
  const auto c = run_cli("calibrate --trace " + trace.string() + " -o " +
                         (trace.string() + ".smcal") + " --cache 1000");
  EXPECT_EQ(c.status, 1) << c.output;
  EXPECT_NE(c.output.find("--cache: value: expected at most the trace's 64 experts"),
            std::string::npos)
      << c.output;
  fs::remove_all(trace);
}

// bench --scores-from replays another model's routing: that model's calibration is needed, and
// the error says so rather than "none found beside" a model that has its own.
TEST(CliBench, ScoresFromNeedsTheTraceModelsCalibration) {
  const fs::path tiny = fs::path(STEERMOE_SOURCE_DIR) / "models" / "steer-olmoe-tiny";
  const fs::path trace = fs::temp_directory_path() / "steermoe_cli_scores_from";
  fs::remove_all(trace);
  ASSERT_EQ(run_cli("trace -m " + tiny.string() + " -f " +
                    (fs::path(STEERMOE_SOURCE_DIR) / "data" / "text" / "eval.txt").string() +
                    " --window 16 --max-tokens 32 -o " + trace.string())
                .status,
            0);
  const std::string bench = "bench -m " + kSmall.string() + " --scores-from " + trace.string() +
                            " --policy psr:lambda=0.3,n=1 --cache 16 --windows 1 --window-len 16 "
                            "--rounds 1 --no-floor";
  const auto missing = run_cli(bench);
  EXPECT_EQ(missing.status, 1) << missing.output;
  EXPECT_NE(missing.output.find("needs the calibration of the model the trace --scores-from"),
            std::string::npos)
      << missing.output;
  const auto given = run_cli(bench + " --calib " + (tiny / "calib.smcal").string());
  EXPECT_EQ(given.status, 0) << given.output;
  fs::remove_all(trace);
}

// quantize of a model quantized already works from the dequantized values, and says what that
// costs (llama-quantize wants --allow-requantize); from BF16 it says nothing of the kind.
TEST(CliQuantize, RequantizingWarns) {
  const fs::path dir = fs::temp_directory_path();
  const fs::path bf16 = dir / "steermoe_cli_rq_bf16.gguf", q8 = dir / "steermoe_cli_rq_q8.gguf",
                 q4 = dir / "steermoe_cli_rq_q4.gguf";
  ASSERT_EQ(run_cli("make-model --arch olmoe --shape olmoe-small --random --dtype bf16 -o " +
                    bf16.string())
                .status,
            0);
  const auto first = run_cli("quantize -m " + bf16.string() + " --type q8_0 -o " + q8.string());
  ASSERT_EQ(first.status, 0) << first.output;
  EXPECT_EQ(first.output.find("re-quantized"), std::string::npos) << first.output;
  const auto again = run_cli("quantize -m " + q8.string() + " --type q4_0 -o " + q4.string());
  ASSERT_EQ(again.status, 0) << again.output;
  EXPECT_NE(again.output.find("holds quantized tensors already"), std::string::npos)
      << again.output;
  for (const fs::path& p : {bf16, q8, q4}) fs::remove(p);
}

// A text file that is not UTF-8 is named in the error of every command that reads one.
TEST(CliErrors, ATextFileThatIsNotUtf8IsNamed) {
  const fs::path bad = fs::temp_directory_path() / "steermoe_cli_not_utf8.txt";
  std::ofstream(bad, std::ios::binary) << "ab\xff"
                                       << "cd";
  const std::string m = " -m " + kSmall.string();
  for (const std::string& cmd :
       {"tokenize" + m + " --file " + bad.string(), "perplexity" + m + " -f " + bad.string(),
        "kl" + m + " -f " + bad.string() + " --policy exact:evict=lru",
        "trace" + m + " -f " + bad.string() + " -o " + (bad.string() + ".trace")}) {
    const auto r = run_cli(cmd);
    EXPECT_EQ(r.status, 1) << cmd << ": " << r.output;
    EXPECT_NE(r.output.find(bad.string() + ": encoding: expected valid UTF-8 text"),
              std::string::npos)
        << cmd << ": " << r.output;
  }
  fs::remove(bad);
}

// detokenize --ids: commas, spaces or a JSON array; "[]" is no ids; a lost id ("1,,2", ",1") or
// no ids at all ("") is refused rather than read as fewer tokens.
TEST(CliTokenize, IdListsAreReadWholeOrRefused) {
  const std::string base = "detokenize -m " + kSmall.string() + " --ids ";
  const std::string abc = run_cli(base + "'1,2,3'").output;
  EXPECT_FALSE(abc.empty());
  EXPECT_EQ(run_cli(base + "'[1, 2, 3]'").output, abc);
  EXPECT_EQ(run_cli(base + "'1 2 3'").output, abc);
  const auto none = run_cli(base + "'[]'");
  EXPECT_EQ(none.status, 0) << none.output;
  for (const char* bad : {"'1,,2'", "',1'", "''", "'  '"}) {
    const auto r = run_cli(base + bad);
    EXPECT_EQ(r.status, 1) << bad << ": " << r.output;
    EXPECT_NE(r.output.find("--ids"), std::string::npos) << bad << ": " << r.output;
  }
}

// `kl --draft`: teacher-forced speculative decoding. Under `rollback` the committed positions'
// logits are plain PSR's, so the KL to exact routing is AR PSR's; under `exact` verification of
// exact routing it is zero; the rows report tokens per verification and copies by kind.
TEST(CliKl, DraftRollbackScoresLikePlainDecoding) {
  const std::string drafter =
      (fs::path(STEERMOE_SOURCE_DIR) / "models" / "steer-drafter-small").string();
  const fs::path dir = fs::temp_directory_path() / ("steermoe_cli_kl_" + std::to_string(getpid()));
  fs::create_directories(dir);
  const std::string base =
      "kl -m " + kSmall.string() + " -f " +
      (fs::path(STEERMOE_SOURCE_DIR) / "data" / "text-small" / "eval.txt").string() +
      " --window-len 64 --max-windows 3 --cache 24 ";
  const auto kl = [&](const std::string& extra, const std::string& name) {
    const fs::path json = dir / name;
    const auto r = run_cli(base + extra + " --json " + json.string());
    EXPECT_EQ(r.status, 0) << r.output;
    return read_json_file(json.string(), "kl --json")["configurations"];
  };
  const nlohmann::json plain = kl("--policy psr:lambda=0.3,n=1", "plain.json");
  const nlohmann::json rollback =
      kl("--policy psr:lambda=0.3,n=1 --draft " + drafter + " --spec-select rollback", "rb.json");
  ASSERT_EQ(plain.size(), 1u);
  ASSERT_EQ(rollback.size(), 1u);
  const double plain_kl = plain[0]["kl"]["mean"].get<double>();
  EXPECT_GT(plain_kl, 0.01) << "PSR at 24 of 64 replaces experts";
  EXPECT_NEAR(rollback[0]["kl"]["mean"].get<double>(), plain_kl, 1e-6 * (1 + plain_kl));
  EXPECT_GT(rollback[0]["speculative"]["tau"].get<double>(), 1.0);
  EXPECT_GT(rollback[0]["copies_per_token"]["restore"].get<double>(), 0.0);
  EXPECT_FALSE(plain[0].contains("speculative"));
  const nlohmann::json exact = kl("--policy exact:evict=lru --draft " + drafter +
                                      " --spec-select exact --pool 24 "
                                      "--union-slots 24",
                                  "exact.json");
  EXPECT_LT(exact[0]["kl"]["mean"].get<double>(), 1e-6);
  EXPECT_GT(exact[0]["copies_per_token"]["block"].get<double>(), 0.0);
  fs::remove_all(dir);
}

// `score --draft`: each continuation verified in blocks behind the drafts; under `rollback` the
// log-likelihoods are plain PSR's, a synthetic drafter included.
TEST(CliScore, DraftRollbackScoresLikePlainDecoding) {
  const fs::path dir =
      fs::temp_directory_path() / ("steermoe_cli_score_" + std::to_string(getpid()));
  fs::create_directories(dir);
  const fs::path requests = dir / "r.jsonl";
  {
    std::ofstream out(requests);
    out << R"({"context": "def read_config(path):\n    with open(path) as f:", "continuation": "\n        return json.load(f)\n"})"
        << "\n"
        << R"({"context": "import os", "continuation": "\nimport sys\nimport re\n"})"
        << "\n";
  }
  const std::string base = "score -m " + kSmall.string() + " -f " + requests.string() +
                           " --policy psr:lambda=0.3,n=1 --cache 24 ";
  const auto lines = [&](const std::string& extra) {
    const auto r = run_cli(base + extra);
    EXPECT_EQ(r.status, 0) << r.output;
    std::vector<double> ll;
    std::istringstream in(r.output);
    for (std::string line; std::getline(in, line);)
      if (line.rfind("{", 0) == 0)
        ll.push_back(parse_json(line, "score")["loglikelihood"].get<double>());
    return ll;
  };
  const std::vector<double> plain = lines("");
  ASSERT_EQ(plain.size(), 2u);
  const std::string drafter =
      (fs::path(STEERMOE_SOURCE_DIR) / "models" / "steer-drafter-small").string();
  for (const std::string& d : {drafter, std::string("synthetic:0.5")}) {
    const std::vector<double> spec = lines("--draft " + d + " --spec-select rollback");
    ASSERT_EQ(spec.size(), plain.size()) << d;
    for (size_t i = 0; i < plain.size(); ++i) EXPECT_NEAR(spec[i], plain[i], 1e-4) << d;
  }
  fs::remove_all(dir);
}

// --- output paths --------------------------------------------------------------------------

const fs::path kTiny = fs::path(STEERMOE_SOURCE_DIR) / "models" / "steer-olmoe-tiny";

// A device where every write fails with ENOSPC: /dev/full's twin in a private folder when this
// process may create device nodes (root: so that a regression that renames onto the output
// replaces only the twin), else /dev/full itself.
fs::path full_device() {
  static const fs::path path = [] {
    const fs::path dir = fs::temp_directory_path() / ("steermoe_cli_" + std::to_string(getpid()));
    fs::create_directories(dir);
    const fs::path node = dir / "full";
    fs::remove(node);
    if (::mknod(node.c_str(), S_IFCHR | 0666, makedev(1, 7)) == 0) return node;
    return fs::path("/dev/full");
  }();
  return path;
}

// `stdout_to`: where stdout goes (stderr stays on the pipe the test reads).
void expect_write_failure(const std::string& args, const std::string& named,
                          const std::string& stdout_to = "") {
  const fs::path dev = full_device();
  std::string command = std::string(STEERMOE_BINARY) + " " + args + " 2>&1";
  if (!stdout_to.empty()) command += " >" + stdout_to;
  test_support::CliResult r;
  std::FILE* pipe = ::popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, pipe)) > 0;) r.output.append(buf, n);
  const int status = ::pclose(pipe);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  EXPECT_EQ(r.status, 1) << args << "\n" << r.output;
  EXPECT_NE(r.output.find(named), std::string::npos) << args << "\n" << r.output;
  EXPECT_NE(r.output.find("output"), std::string::npos) << r.output;
  struct stat st {};
  ASSERT_EQ(::stat(dev.c_str(), &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode)) << dev << " was replaced by the command";
}

// A report file in a folder that does not exist is refused when the command line is read, not
// after the work; "--json -" writes the JSON alone on stdout (the table goes to stderr) in every
// command that writes JSON.
TEST(CliOutput, ReportPathsAreCheckedFirstAndDashIsStdout) {
  const std::string m =
      " -m " + kSmall.string() + " -f " +
      (fs::path(STEERMOE_SOURCE_DIR) / "data" / "text-small" / "eval.txt").string();
  const std::string missing = (fs::temp_directory_path() / "no_such_folder" / "r.json").string();
  const std::string kl = "kl" + m +
                         " --residency 0.5 --policy psr:lambda=0.3,n=1 --max-windows 1 " +
                         "--window-len 32";
  const std::string bench =
      "bench" + m + " --policy exact:evict=lru --windows 1 --window-len 8 " + "--rounds 1";
  for (const std::string& cmd : {kl, bench}) {
    const auto r = run_cli(cmd + " --json " + missing);
    EXPECT_EQ(r.status, 1) << r.output;
    EXPECT_NE(r.output.find("no_such_folder does not exist"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("ms/token"), std::string::npos) << "worked first: " << r.output;
    // Only stdout reaches the pipe: it must be the JSON document and nothing else.
    const auto json = run_cli(cmd + " --json - 2>/dev/null | cat");
    EXPECT_NO_THROW(parse_json_or_throw(json.output)) << cmd << "\n" << json.output;
  }
}

// Every command that takes the engine options honours --mem-limit as run does: a budget the
// model does not fit in is refused naming its parts, before any weight is copied into memory
// (it had been ignored by trace, perplexity and logits); kl, which computes with every expert
// resident whatever the link, refuses the option.
TEST(CliBudget, EveryEngineCommandHonoursTheMemoryLimit) {
  const std::string text =
      (fs::path(STEERMOE_SOURCE_DIR) / "data" / "text-small" / "eval.txt").string();
  const fs::path out = fs::temp_directory_path() / "steermoe_cli_budget";
  fs::remove_all(out);
  const std::string m = "-m " + kSmall.string() + " --mem-limit 200M ";
  for (const std::string& args :
       {"trace " + m + "-f " + text + " --max-tokens 16 -o " + out.string(),
        "perplexity " + m + "-f " + text + " --max-windows 1",
        "logits " + m + "--tokens 1,2,3 -o " + (out.string() + ".bin")}) {
    const auto r = run_cli(args);
    if (r.output.find("expected to create a memory cgroup") != std::string::npos)
      GTEST_SKIP() << "no writable memory cgroup here: " << r.output;
    EXPECT_EQ(r.status, 1) << args << ": " << r.output;
    EXPECT_NE(r.output.find("--mem-limit: budget: expected 200.0 MiB to hold"), std::string::npos)
        << args << ": " << r.output;
  }
  EXPECT_FALSE(fs::exists(out));
  // run's budget holds the KV positions its text reaches, not all of -c (the cache's pages are
  // touched position by position): 200000 positions of KV (1.5 GiB) under 600 MiB, 6 reached.
  const auto long_c =
      run_cli("run -m " + kSmall.string() + " -p hi -n 4 --temp 0 -c 200000 --mem-limit 600M");
  EXPECT_EQ(long_c.status, 0) << long_c.output;
  EXPECT_NE(long_c.output.find("cgroup peak"), std::string::npos) << long_c.output;
  // Pages of the model cached before the run do not count against the budget: their size is
  // said, counting the files the loader reads (model.safetensors here), not others in the folder.
  const fs::path copy = fs::temp_directory_path() / "steermoe_cli_cached_model";
  fs::remove_all(copy);
  fs::copy(kSmall, copy, fs::copy_options::recursive);
  { std::ofstream(copy / "stray.safetensors") << std::string(size_t{80} << 20, 'x'); }
  {  // read the weights: they are in the page cache now
    std::ifstream in(copy / "model.safetensors", std::ios::binary);
    std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }
  const auto cached = run_cli("run -m " + copy.string() + " -p hi -n 1 --mem-limit 600M");
  EXPECT_EQ(cached.status, 0) << cached.output;
  const uint64_t weights = fs::file_size(copy / "model.safetensors");
  EXPECT_NE(cached.output.find(bytes_text(weights) +
                               " of the model's files is already in the page cache"),
            std::string::npos)
      << cached.output;
  fs::remove_all(copy);
  // Where run's KV does not fit, it is -n that sizes it, and the refusal says so.
  const auto long_n =
      run_cli("run -m " + kSmall.string() + " -p hi -n 20000 --temp 0 -c 32768 --mem-limit 350M");
  EXPECT_EQ(long_n.status, 1) << long_n.output;
  EXPECT_NE(long_n.output.find("is a large part: lower -n"), std::string::npos) << long_n.output;
  // A budget above the machine's memory bounds nothing: said.
  const auto huge = run_cli("run -m " + kSmall.string() + " -p hi -n 1 --mem-limit 100T");
  EXPECT_NE(huge.output.find("is more than this machine's"), std::string::npos) << huge.output;
  const auto kl = run_cli("kl " + m + "-f " + text + " --policy exact:evict=lru");
  EXPECT_EQ(kl.status, 1) << kl.output;
  EXPECT_NE(kl.output.find("kl: --mem-limit: expected no memory budget"), std::string::npos)
      << kl.output;
}

TEST(CliOutput, EveryOutputPathReportsAFailedWrite) {
  const std::string dev = full_device().string();
  const fs::path text = fs::path(STEERMOE_SOURCE_DIR) / "data" / "text" / "heldout.txt";
  // Files named by a flag.
  expect_write_failure("logits -m " + kTiny.string() + " --tokens 1,2,3 -o " + dev, dev);
  expect_write_failure("perplexity -m " + kTiny.string() + " -f " + text.string() +
                           " --window 32 --max-windows 1 --scores " + dev,
                       dev);
  // Outputs renamed into place are refused before any work.
  expect_write_failure("convert -m " + kTiny.string() + " -o " + dev, dev);
  // stdout.
  expect_write_failure("tokenize -m " + kTiny.string() + " --text 'hello world'", "stdout", dev);
  expect_write_failure("run -m " + kTiny.string() + " -p hello -n 4", "stdout", dev);
  if (full_device() != "/dev/full") fs::remove_all(full_device().parent_path());
}

}  // namespace
}  // namespace steermoe
