// compare: score files and lm-evaluation-harness folders paired by task and id, the whole
// pipeline (tests, Holm, mean over tasks) against SciPy; bench --json latency ratios; the CLI's
// markdown and JSON; input errors name the file and field.
#include "eval/compare.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>

#include "../json_test_util.hpp"
#include "common/error.hpp"
#include "test_util.hpp"

namespace steermoe::eval {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::close;
using testing::expected;
using testing::kData;
using testing::value;

void expect_rows(const json& got, const json& want) {
  ASSERT_EQ(got.size(), want.size()) << steermoe::dump_json(got, 1);
  for (size_t i = 0; i < want.size(); ++i) {
    SCOPED_TRACE(want[i]["task"].get<std::string>());
    EXPECT_EQ(got[i]["task"], want[i]["task"]);
    EXPECT_EQ(got[i]["n"], want[i]["n"]);
    EXPECT_EQ(got[i]["test"], want[i]["test"]);
    EXPECT_TRUE(close(value(got[i]["mean_diff"]), value(want[i]["mean_diff"]), 1e-12));
    // SciPy's t quantile is off by up to 4e-9 (stats_test.cpp): its interval ends are checked
    // through the half-width at 1e-8, and the half-width against mpmath at 1e-12.
    const double lo = value(got[i]["ci_low"]), hi = value(got[i]["ci_high"]);
    const double want_lo = value(want[i]["ci_low"]), want_hi = value(want[i]["ci_high"]);
    EXPECT_TRUE(close(0.5 * (hi - lo), 0.5 * (want_hi - want_lo), 1e-8));
    EXPECT_TRUE(close(0.5 * (hi + lo), 0.5 * (want_hi + want_lo), 1e-12));
    if (want[i].contains("half_width_mp") && !want[i]["half_width_mp"].is_null()) {
      EXPECT_TRUE(close(0.5 * (hi - lo), want[i]["half_width_mp"], 1e-12));
    }
    for (const char* key : {"p", "p_holm"})
      EXPECT_TRUE(close(value(got[i][key]), value(want[i][key]), 1e-9)) << key;
  }
}

fs::path temp(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / "steermoe_test_eval";
  fs::create_directories(dir);
  return dir / name;
}

TEST(Compare, ScoreFilesMatchScipyEndToEnd) {
  const auto a = read_scores_jsonl((kData / "scores_a.jsonl").string());
  const auto b = read_scores_jsonl((kData / "scores_b.jsonl").string());
  const auto tasks = pair_scores(a, "A", b, "B", false, nullptr);
  ASSERT_EQ(tasks.size(), 3u);
  const CompareOptions options;
  const auto rows = compare_tasks(tasks, options);
  expect_rows(tasks_json(rows, summarize_tasks(rows), options), expected().at("compare_scores"));
}

TEST(Compare, PairsByIdNotByLineOrder) {
  const auto a = read_scores_jsonl((kData / "scores_a.jsonl").string());
  const auto b = read_scores_jsonl((kData / "scores_b.jsonl").string());
  const auto tasks = pair_scores(a, "A", b, "B", false, nullptr);
  for (const PairedTask& t : tasks) {
    if (t.task != "continuous") continue;
    ASSERT_EQ(t.ids.size(), 14u);
    for (size_t i = 0; i < t.ids.size(); ++i) {
      EXPECT_EQ(t.ids[i], std::to_string(i));  // A's order; B was written in reverse
      EXPECT_NEAR(t.b[i], t.a[i], 0.5);        // B is A plus small noise
    }
  }
}

TEST(Compare, LmEvalFoldersMatchScipy) {
  std::vector<std::string> notes;
  const auto a = read_lm_eval_dir((kData / "lm_eval_a").string(), {}, &notes);
  const auto b = read_lm_eval_dir((kData / "lm_eval_b").string(), {}, &notes);
  // gsm8k has two filters: the first (strict-match) is used, with a note.
  EXPECT_THAT(notes, ::testing::Contains(::testing::HasSubstr("\"strict-match\"")));
  EXPECT_THAT(notes, ::testing::Contains(::testing::HasSubstr("task arc_easy: metric acc")));
  EXPECT_THAT(notes, ::testing::Contains(::testing::HasSubstr("task gsm8k: metric exact_match")));
  const auto tasks = pair_scores(a, "A", b, "B", false, nullptr);
  const auto rows = compare_tasks(tasks, {});
  json got = tasks_json(rows, summarize_tasks(rows), {});
  got.erase(got.size() - 1);  // the mean row is checked with the score files
  expect_rows(got, expected().at("compare_lm_eval"));
}

TEST(Compare, LmEvalFilterAndMetricOptions) {
  const fs::path dir = temp("lm_eval_gsm8k");
  fs::create_directories(dir);
  fs::copy_file(
      kData / "lm_eval_a" / "org__model" / "samples_gsm8k_2025-01-01T00-00-00.000000.jsonl",
      dir / "samples_gsm8k_2025-01-01T00-00-00.000000.jsonl", fs::copy_options::overwrite_existing);
  const auto strict = read_lm_eval_dir(dir.string(), {"", "strict-match"}, nullptr);
  const auto flexible = read_lm_eval_dir(dir.string(), {"", "flexible-extract"}, nullptr);
  const auto first = read_lm_eval_dir(dir.string(), {}, nullptr);
  ASSERT_EQ(strict.size(), 16u);
  ASSERT_EQ(flexible.size(), 16u);
  bool differ = false;
  for (size_t i = 0; i < strict.size(); ++i) {
    EXPECT_EQ(first[i].score, strict[i].score);  // the first filter in the file
    differ = differ || strict[i].score != flexible[i].score;
  }
  EXPECT_TRUE(differ);
  // Other tasks have filter "none" only: asking for strict-match there is an error.
  EXPECT_THROW(
      read_lm_eval_dir((kData / "lm_eval_a").string(), {"exact_match", "strict-match"}, nullptr),
      Error);
  try {
    read_lm_eval_dir((kData / "lm_eval_a").string(), {"acc_norm", ""}, nullptr);
    FAIL() << "gsm8k has no acc_norm";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("samples_gsm8k"));
    EXPECT_THAT(e.what(), ::testing::HasSubstr("acc_norm"));
  }
}

TEST(Compare, UnpairedIdIsAnErrorUnlessIntersect) {
  const fs::path a = temp("a.jsonl"), b = temp("b.jsonl");
  std::ofstream(a) << R"({"task": "t", "id": 1, "score": 1})"
                   << "\n"
                   << R"({"task": "t", "id": 2, "score": 0})"
                   << "\n";
  std::ofstream(b) << R"({"task": "t", "id": 1, "score": 0})"
                   << "\n";
  const auto sa = read_scores_jsonl(a.string()), sb = read_scores_jsonl(b.string());
  try {
    pair_scores(sa, a.string(), sb, b.string(), false, nullptr);
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("id 2"));
  }
  std::vector<std::string> notes;
  const auto tasks = pair_scores(sa, a.string(), sb, b.string(), true, &notes);
  ASSERT_EQ(tasks.size(), 1u);
  EXPECT_EQ(tasks[0].a.size(), 1u);
  EXPECT_THAT(notes, ::testing::Contains(::testing::HasSubstr("dropped 1")));
}

TEST(Compare, BadScoreLinesNameFileLineAndField) {
  const fs::path p = temp("bad.jsonl");
  std::ofstream(p) << R"({"task": "t", "id": 1, "score": 1})"
                   << "\n"
                   << R"({"task": "t", "id": 1, "score": 0})"
                   << "\n";
  EXPECT_THROW(
      {
        try {
          read_scores_jsonl(p.string());
        } catch (const Error& e) {
          EXPECT_THAT(e.what(), ::testing::HasSubstr("bad.jsonl:2: id"));
          throw;
        }
      },
      Error);
  std::ofstream(p) << R"({"task": "t", "id": 1, "score": "high"})"
                   << "\n";
  EXPECT_THROW(read_scores_jsonl(p.string()), Error);
  std::ofstream(p) << R"({"task": "t", "score": 1})"
                   << "\n";
  EXPECT_THROW(read_scores_jsonl(p.string()), Error);
  std::ofstream(p) << "not json\n";
  EXPECT_THROW(read_scores_jsonl(p.string()), Error);
  // Python's json.dumps writes NaN for a non-finite float: named, not "expected a JSON object".
  std::ofstream(p) << R"({"task": "t", "id": 1, "score": NaN})"
                   << "\n";
  try {
    read_scores_jsonl(p.string());
    ADD_FAILURE() << "read a NaN score";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("bad.jsonl:1: line: expected a JSON object of "
                                               "finite numbers, found NaN"));
  }
}

TEST(Compare, LatencyRatiosFromBenchJsonMatchScipy) {
  std::ifstream in(kData / "bench_fixture.json");
  const json bench = steermoe::test_support::parse_json_stream(in);
  const auto rows = compare_latency(bench, "bench_fixture.json", "");
  const json got = latency_json(rows);
  const json& want = expected().at("compare_latency");
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i]["a"], want[i]["a"]);
    EXPECT_EQ(got[i]["b"], want[i]["b"]);
    EXPECT_EQ(got[i]["rounds"], want[i]["rounds"]);
    EXPECT_TRUE(close(value(got[i]["ratio"]), value(want[i]["ratio"]), 1e-12));
    for (const char* key : {"ci_low", "ci_high"})
      EXPECT_TRUE(close(value(got[i][key]), value(want[i][key]), 1e-8)) << key;
    for (const char* key : {"p", "p_holm"})
      EXPECT_TRUE(close(value(got[i][key]), value(want[i][key]), 1e-9)) << key;
  }
  // Another baseline: the ratio of PSR to Cache-Prior is the quotient of the two ratios.
  const auto vs_cp = compare_latency(bench, "bench_fixture.json", "cacheprior:lambda=0.2@32");
  ASSERT_EQ(vs_cp.size(), 2u);
  EXPECT_NEAR(vs_cp[1].ratio.ratio, rows[0].ratio.ratio / rows[1].ratio.ratio, 1e-12);
  EXPECT_THROW(compare_latency(bench, "bench_fixture.json", "nonesuch"), Error);
}

TEST(Compare, LatencyRoundsMustPair) {
  std::ifstream in(kData / "bench_fixture.json");
  json bench = steermoe::test_support::parse_json_stream(in);
  bench["configurations"][1]["rounds"].erase(2);
  EXPECT_THROW(compare_latency(bench, "x.json", ""), Error);
  bench["configurations"][1]["rounds"][0]["ms_per_token"]["mean"] = -1;
  EXPECT_THROW(compare_latency(bench, "x.json", ""), Error);
}

// A sweep's bench.json times each point in its own run: its rounds do not pair, and compare
// refuses them (it printed paired intervals and p-values), by the flag or by the older note.
TEST(Compare, LatencyRefusesRoundsTimedInSeparateRuns) {
  std::ifstream in(kData / "bench_fixture.json");
  const json fixture = steermoe::test_support::parse_json_stream(in);
  EXPECT_NO_THROW(compare_latency(fixture, "x.json", ""));
  json bench = fixture;
  bench["interleaved"] = false;
  try {
    compare_latency(bench, "sweep/bench.json", "");
    ADD_FAILURE() << "paired a sweep's rounds";
  } catch (const Error& e) {
    EXPECT_THAT(std::string(e.what()),
                ::testing::HasSubstr("sweep/bench.json: interleaved: expected configurations "
                                     "timed in one bench run"));
  }
  json noted = fixture;
  noted["note"] =
      "each point timed by its own `steermoe bench` run (not interleaved across points)";
  EXPECT_THROW(compare_latency(noted, "x.json", ""), Error);
}

// Another report (kl --json) is named by its schema, not by a field bench's schema has.
TEST(Compare, LatencyNamesAWrongSchema) {
  const json kl = {{"schema", "steermoe.kl/1"}, {"configurations", {{{"policy", "exact"}}}}};
  try {
    compare_latency(kl, "kl.json", "");
    ADD_FAILURE() << "accepted a kl report";
  } catch (const Error& e) {
    EXPECT_THAT(
        std::string(e.what()),
        ::testing::HasSubstr("kl.json: schema: expected \"steermoe.bench/1\" (bench --json), "
                             "found \"steermoe.kl/1\""));
  }
}

TEST(Compare, UnderflowedPValueIsNotPrintedAsZero) {
  TaskRow row;
  row.task = "t";
  row.n = 5000;
  row.test = "sign-flip";
  row.p = 0.0;  // what a normal tail past ~38 sigma gives in double
  row.p_holm = 3e-9;
  const std::string md = tasks_markdown({row}, TaskSummary{}, "a", "b", CompareOptions{});
  EXPECT_THAT(md, ::testing::HasSubstr("< 2.2e-308"));
  EXPECT_THAT(md, ::testing::HasSubstr("3.0e-09"));
  EXPECT_THAT(md, ::testing::Not(::testing::HasSubstr("0.0e+00")));
}

TEST(Compare, CliWritesMarkdownAndJson) {
  const fs::path out = temp("compare.json");
  const auto r = testing::run_cli("compare --scores " + (kData / "scores_a.jsonl").string() + " " +
                                  (kData / "scores_b.jsonl").string() + " --json " + out.string());
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_THAT(r.output, ::testing::HasSubstr("| binary | 40 |"));
  EXPECT_THAT(r.output, ::testing::HasSubstr("mcnemar"));
  EXPECT_THAT(r.output, ::testing::HasSubstr("95% lower bound"));
  std::ifstream in(out);
  expect_rows(steermoe::test_support::parse_json_stream(in), expected().at("compare_scores"));

  const auto lat = testing::run_cli("compare --latency " + (kData / "bench_fixture.json").string());
  ASSERT_EQ(lat.status, 0) << lat.output;
  EXPECT_THAT(lat.output,
              ::testing::HasSubstr("| psr:lambda=0.3,n=1@32 | exact:evict=lru@32 | 3 |"));

  const auto lm = testing::run_cli("compare --lm-eval " + (kData / "lm_eval_a").string() + " " +
                                   (kData / "lm_eval_b").string() + " --filter strict-match");
  EXPECT_NE(lm.status, 0);  // arc_easy has no strict-match filter
  EXPECT_THAT(lm.output, ::testing::HasSubstr("strict-match"));

  const auto none = testing::run_cli("compare");
  EXPECT_NE(none.status, 0);
  EXPECT_THAT(none.output, ::testing::HasSubstr("expected exactly one of"));
}

}  // namespace
}  // namespace steermoe::eval
