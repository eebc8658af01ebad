// `steermoe sim` end to end on a small synthetic trace: the JSON report, the loop statement,
// the physical-mode warning and the per-token latency file.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "../json_test_util.hpp"

namespace {

namespace fs = std::filesystem;

std::string read_all(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

int run(const std::string& command) {
  return std::system(command.c_str());
}

TEST(SimCommand, ReportsLatencyCopiesLoopAndTimingDependence) {
  const std::string bin = STEERMOE_BINARY;
  if (!fs::exists(bin)) GTEST_FAIL() << "steermoe binary not built: " << bin;
  const fs::path dir =
      fs::temp_directory_path() / ("steermoe-sim-cli-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string d = dir.string();
  ASSERT_EQ(run(bin + " trace-synth --shape olmoe --tokens 96 --sequences 2 --seed 1 -o " + d +
                "/held >/dev/null"),
            0);
  ASSERT_EQ(run(bin + " trace-synth --shape olmoe --tokens 64 --sequences 2 --seed 2 -o " + d +
                "/eval >/dev/null"),
            0);
  ASSERT_EQ(run(bin + " calibrate --trace " + d + "/held -o " + d + "/c.smcal >/dev/null"), 0);
  ASSERT_EQ(
      run(bin + " sim --trace " + d + "/eval --calib " + d +
          "/c.smcal --profile rtx4090-olmoe --cache 32 --max-inflight 1 4 --policy "
          "exact:evict=lru psr:lambda=0.3,n=1 physical:psr:lambda=0.3,n=8 --json - --latencies " +
          d + "/lat.csv > " + d + "/out.json 2> " + d + "/err.txt"),
      0);
  const nlohmann::json report = steermoe::parse_json_or_throw(read_all(dir / "out.json"));
  ASSERT_EQ(report["results"].size(), 6u);  // 3 policies x 2 max_inflight values
  const auto& results = report["results"];
  EXPECT_EQ(results[0]["loop"], "closed");  // exact routing on an exact-routing trace
  EXPECT_EQ(results[2]["loop"], "open");    // PSR on a trace recorded under exact routing
  for (const auto& r : results) {
    EXPECT_GE(r["ms_per_token"]["p99"].get<double>(), r["ms_per_token"]["p50"].get<double>());
    EXPECT_GE(r["ms_per_token"]["mean"].get<double>(), r["compute_floor_ms"].get<double>() - 1e-9);
    EXPECT_EQ(r["stall_ms_per_token_by_layer"].size(), 16u);
    EXPECT_NEAR(r["copies_per_token"]["total"].get<double>(),
                r["copies_per_token"]["demand"].get<double>() +
                    r["copies_per_token"]["prefetch"].get<double>(),
                1e-9);
  }
  // Logical policies: same decisions at max_inflight 1 and 4. The physical mode is flagged.
  EXPECT_EQ(results[0]["decision_hash"], results[1]["decision_hash"]);
  EXPECT_EQ(results[2]["decision_hash"], results[3]["decision_hash"]);
  EXPECT_TRUE(results[4]["physical_demonstration_mode"].get<bool>());
  const std::string err = read_all(dir / "err.txt");
  EXPECT_NE(err.find("WARNING"), std::string::npos) << err;
  EXPECT_NE(err.find("| policy |"), std::string::npos);  // the table goes to stderr with --json -
  const std::string latencies = read_all(dir / "lat.csv");
  EXPECT_EQ(std::count(latencies.begin(), latencies.end(), '\n'), 1 + 6 * 64);
  // Two --prefetch-issue values: one row each, named in the JSON; the same decisions.
  ASSERT_EQ(run(bin + " sim --trace " + d + "/eval --calib " + d +
                "/c.smcal --profile cpu-disk-olmoe --cache 16 --prefetch-issue boundary early "
                "--policy psr:lambda=0.3,n=2 --json - > " +
                d + "/issue.json 2>/dev/null"),
            0);
  const nlohmann::json issue = steermoe::parse_json_or_throw(read_all(dir / "issue.json"));
  ASSERT_EQ(issue["results"].size(), 2u);
  EXPECT_EQ(issue["results"][0]["prefetch_issue"], "boundary");
  EXPECT_EQ(issue["results"][1]["prefetch_issue"], "early");
  EXPECT_EQ(issue["results"][0]["decision_hash"], issue["results"][1]["decision_hash"]);
  EXPECT_NE(run(bin + " sim --trace " + d + "/eval --calib " + d +
                "/c.smcal --cache 16 --prefetch-issue later --policy exact 2>/dev/null >/dev/null"),
            0);
  // --moe-wait ready: named in the JSON, the same decisions as all, less time.
  ASSERT_EQ(run(bin + " sim --trace " + d + "/eval --calib " + d +
                "/c.smcal --profile cpu-disk-olmoe --cache 16 --moe-wait ready "
                "--policy psr:lambda=0.3,n=2 --json - > " +
                d + "/ready.json 2>/dev/null"),
            0);
  const nlohmann::json ready = steermoe::parse_json_or_throw(read_all(dir / "ready.json"));
  ASSERT_EQ(ready["results"].size(), 1u);
  EXPECT_EQ(issue["results"][0]["moe_wait"], "all");
  EXPECT_EQ(ready["results"][0]["moe_wait"], "ready");
  EXPECT_EQ(ready["results"][0]["decision_hash"], issue["results"][0]["decision_hash"]);
  EXPECT_LT(ready["results"][0]["ms_per_token"]["mean"].get<double>(),
            issue["results"][0]["ms_per_token"]["mean"].get<double>());
  EXPECT_NE(run(bin + " sim --trace " + d + "/eval --calib " + d +
                "/c.smcal --cache 16 --moe-wait some --policy exact 2>/dev/null >/dev/null"),
            0);
  // Bad input: an unknown profile is a clean error, not a crash.
  EXPECT_NE(run(bin + " sim --trace " + d + "/eval --calib " + d +
                "/c.smcal --profile nope --cache 32 --policy exact 2>/dev/null >/dev/null"),
            0);
  fs::remove_all(dir);
}

}  // namespace
