// The CLI as a user meets it, through the built binary: `run`'s sampling defaults (llama-cli's)
// keep the shipped small model from looping where greedy decoding does.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <sstream>
#include <string>

#include "../cli_runner.hpp"

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

TEST(CliRun, HelpStatesTheSamplingDefaults) {
  const auto r = run_cli("run --help");
  ASSERT_EQ(r.status, 0);
  for (const char* flag :
       {"--temp FLOAT:FLOAT in [0 - 100]=0.8", "--top-k INT:INT in [0 - 16777216]=40",
        "--top-p FLOAT:FLOAT in [0 - 1]=0.95", "--min-p FLOAT:FLOAT in [0 - 1]=0.05",
        "--repeat-penalty FLOAT:FLOAT in [0.01 - 10]=1.1",
        "--repeat-last-n INT:INT in [-1 - 16777216]=64"}) {
    EXPECT_NE(r.output.find(flag), std::string::npos) << flag << "\n" << r.output;
  }
}

}  // namespace
}  // namespace steermoe
