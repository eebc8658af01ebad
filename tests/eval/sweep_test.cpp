// steermoe sweep on the shipped model with tiny settings: every (policy, cache) point gets its
// kl and bench JSON, the merged kl.json / bench.json have one configuration per point (plus the
// all-resident floor), a rerun recomputes nothing, and other options in the same folder are an
// error naming the option.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "../json_test_util.hpp"
#include "test_util.hpp"

namespace steermoe::eval {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const std::string kTinyModel = std::string(STEERMOE_SOURCE_DIR) + "/models/steer-olmoe-tiny";
const std::string kEvalText = std::string(STEERMOE_SOURCE_DIR) + "/data/text/eval.txt";

json read(const fs::path& p) {
  std::ifstream in(p);
  return steermoe::test_support::parse_json_stream(in);
}

// Every point is checked against the model before the first runs: a cache size outside
// [top-k, experts] is refused up front (it failed when its first point ran, after the others),
// and one policy spelled twice in the grids is computed once.
TEST(Sweep, ChecksEveryPointFirstAndComputesAPolicyOnce) {
  const fs::path dir = fs::temp_directory_path() / "steermoe_test_sweep_checks";
  fs::remove_all(dir);
  const std::string& model = kTinyModel;
  const std::string& text = kEvalText;
  const std::string base = "sweep -m " + model + " -f " + text +
                           " --rounds 1 --windows 1 --window-len 16 --max-windows 1 --plot none"
                           " -o " +
                           dir.string();
  const auto bad = testing::run_cli(base + " --grid exact:evict=lru --cache 32,100");
  EXPECT_EQ(bad.status, 1) << bad.output;
  EXPECT_THAT(bad.output, ::testing::HasSubstr("--cache: expected cache sizes in [8, 64]"));
  EXPECT_FALSE(fs::exists(dir)) << "nothing computed before the refusal";
  const auto twice = testing::run_cli(
      base + " --grid psr:lambda=0.2,n=1 psr:n=1,lambda=0.2 --cache 32 --no-bench");
  ASSERT_EQ(twice.status, 0) << twice.output;
  EXPECT_THAT(twice.output, ::testing::HasSubstr("computed once"));
  EXPECT_EQ(read(dir / "kl.json").at("configurations").size(), 1u);
  fs::remove_all(dir);
}

TEST(Sweep, RunsEveryPointMergesAndResumes) {
  const fs::path dir = fs::temp_directory_path() / "steermoe_test_sweep";
  fs::remove_all(dir);
  const std::string& model = kTinyModel;
  const std::string& text = kEvalText;
  const std::string args = "sweep -m " + model + " -f " + text +
                           " --grid 'psr:lambda=0.2|0.3,n=1' exact:evict=lru --cache 32,16"
                           " --rounds 2 --windows 1 --window-len 24 --max-windows 2 --plot none"
                           " -o " +
                           dir.string();
  const auto first = testing::run_cli(args);
  ASSERT_EQ(first.status, 0) << first.output;
  EXPECT_THAT(first.output, ::testing::HasSubstr("[13/13]"));  // 3 x 2 x (kl + bench) + floor
  // Timed on the resident link (the default), which copies nothing: said.
  EXPECT_THAT(first.output, ::testing::HasSubstr("--link resident copies no expert"));
  const json kl = read(dir / "kl.json"), bench = read(dir / "bench.json");
  EXPECT_EQ(kl.at("schema"), "steermoe.kl/1");
  EXPECT_EQ(bench.at("schema"), "steermoe.bench/1");
  std::set<std::pair<std::string, int>> kl_points, bench_points;
  for (const json& c : kl.at("configurations")) {
    kl_points.emplace(c.at("policy").get<std::string>(), c.at("cache").get<int>());
    // copies_per_token is over the routed tokens: each window's scored ones and its first.
    EXPECT_EQ(c.at("copies_over_tokens").get<int64_t>(),
              c.at("tokens").get<int64_t>() + c.at("windows").get<int64_t>());
  }
  int resident = 0;
  for (const json& c : bench.at("configurations")) {
    if (c.at("resident").get<bool>()) {
      ++resident;
      continue;
    }
    bench_points.emplace(c.at("policy").get<std::string>(), c.at("cache").get<int>());
    EXPECT_EQ(c.at("rounds").size(), 2u);
  }
  EXPECT_EQ(kl_points.size(), 6u);
  EXPECT_EQ(bench_points.size(), 6u);
  EXPECT_EQ(resident, 1);
  for (const json& c : kl.at("configurations")) {
    if (c.at("policy") == "exact:evict=lru") {
      EXPECT_EQ(c.at("kl").at("mean").get<double>(), 0.0);
    }
  }

  const auto again = testing::run_cli(args);
  ASSERT_EQ(again.status, 0) << again.output;
  EXPECT_THAT(again.output, ::testing::HasSubstr("13 points, 13 done earlier"));
  EXPECT_EQ(read(dir / "kl.json"), kl);
  EXPECT_EQ(read(dir / "bench.json"), bench);

  std::string changed = args;
  changed.replace(changed.find("--window-len 24"), 15, "--window-len 32");
  const auto other = testing::run_cli(changed);
  EXPECT_NE(other.status, 0);
  EXPECT_THAT(other.output, ::testing::HasSubstr("window_len"));

  // A folder run at the default prefetch issue refuses a rerun with another one.
  const auto early = testing::run_cli(args + " --prefetch-issue early");
  EXPECT_NE(early.status, 0);
  EXPECT_THAT(early.output, ::testing::HasSubstr("prefetch_issue"));
  fs::remove_all(dir);
}

// --prefetch-pacing / --prefetch-issue / --moe-wait reach every point's bench (its JSON header
// records them), the merged bench.json names them, and a rerun at a default is refused naming the
// option.
// -q: no per-point lines, from the sweep or from its points (they get -q too).
TEST(Sweep, QuietPrintsNoProgress) {
  const fs::path dir = fs::temp_directory_path() / "steermoe_test_sweep_quiet";
  fs::remove_all(dir);
  const std::string& model = kTinyModel;
  const std::string& text = kEvalText;
  const auto run = testing::run_cli("sweep -q -m " + model + " -f " + text +
                                    " --grid psr:lambda=0.3,n=1 --cache 16 --rounds 1 --windows 1"
                                    " --window-len 16 --max-windows 1 --plot none -o " +
                                    dir.string());
  ASSERT_EQ(run.status, 0) << run.output;
  EXPECT_EQ(run.output.find("sweep: ["), std::string::npos) << run.output;
  EXPECT_TRUE(fs::exists(dir / "kl.json"));
}

// Run outside the repository without --plot, the frontier script is the checkout's the binary
// was built from (was: "tools/plot/plot.py not found"). A python that does not exist keeps the
// test from drawing: the message names the script it would run.
TEST(Sweep, FindsItsPlotScriptFromAnyFolder) {
  const fs::path dir = fs::temp_directory_path() / "steermoe_test_sweep_plot";
  fs::remove_all(dir);
  // From a folder with no tools/plot/plot.py (restored after the run).
  const fs::path cwd = fs::current_path();
  fs::current_path(fs::temp_directory_path());
  ASSERT_FALSE(fs::exists("tools/plot/plot.py"));
  const std::string& model = kTinyModel;
  const std::string& text = kEvalText;
  const auto run = testing::run_cli("sweep -q -m " + model + " -f " + text +
                                    " --grid psr:lambda=0.3,n=1 --cache 16 --rounds 1 --windows 1"
                                    " --window-len 16 --max-windows 1 --python /nonexistent/python3"
                                    " -o " +
                                    dir.string());
  fs::current_path(cwd);
  ASSERT_EQ(run.status, 0) << run.output;
  EXPECT_THAT(run.output,
              ::testing::HasSubstr("/nonexistent/python3 " + std::string(STEERMOE_SOURCE_DIR) +
                                   "/tools/plot/plot.py frontier"));
  fs::remove_all(dir);
}

TEST(Sweep, ForwardsThePrefetchModesToEveryPoint) {
  const fs::path dir = fs::temp_directory_path() / "steermoe_test_sweep_modes";
  fs::remove_all(dir);
  const std::string& model = kTinyModel;
  const std::string& text = kEvalText;
  const std::string base = "sweep -m " + model + " -f " + text +
                           " --grid psr:lambda=0.3,n=2 --cache 16 --link emulated:20 --rounds 1"
                           " --windows 1 --window-len 16 --no-kl --plot none -o " +
                           dir.string();
  const std::string modes = " --prefetch-pacing defer --prefetch-issue early --moe-wait ready";
  const auto run = testing::run_cli(base + modes);
  ASSERT_EQ(run.status, 0) << run.output;
  EXPECT_THAT(run.output, ::testing::Not(::testing::HasSubstr("copies no expert")));
  int points = 0;
  for (const auto& entry : fs::directory_iterator(dir / "points")) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("floor", 0) == 0) continue;  // the resident floor copies nothing
    const json point = read(entry.path());
    EXPECT_EQ(point.at("prefetch_pacing"), "defer") << name;
    EXPECT_EQ(point.at("prefetch_issue"), "early") << name;
    EXPECT_EQ(point.at("moe_wait"), "ready") << name;
    ++points;
  }
  EXPECT_EQ(points, 1);
  const json bench = read(dir / "bench.json");
  EXPECT_EQ(bench.at("prefetch_pacing"), "defer");
  EXPECT_EQ(bench.at("prefetch_issue"), "early");
  EXPECT_EQ(bench.at("moe_wait"), "ready");

  const auto resumed = testing::run_cli(base + modes);
  ASSERT_EQ(resumed.status, 0) << resumed.output;
  EXPECT_THAT(resumed.output, ::testing::HasSubstr("2 points, 2 done earlier"));
  const auto defaults = testing::run_cli(base + " --prefetch-pacing defer --moe-wait ready");
  EXPECT_NE(defaults.status, 0);
  EXPECT_THAT(defaults.output, ::testing::HasSubstr("prefetch_issue"));
  EXPECT_THAT(defaults.output, ::testing::HasSubstr("the default"));
  const auto all = testing::run_cli(base + " --prefetch-pacing defer --prefetch-issue early");
  EXPECT_NE(all.status, 0);
  EXPECT_THAT(all.output, ::testing::HasSubstr("moe_wait"));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace steermoe::eval
