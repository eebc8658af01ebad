// Long runs of one character through the whole tokenizer: the run-by-run merge gives the ids
// of the symbol-by-symbol merge loop, and 10 MB of one character is tokenized in linear time
// and bounded memory (it took 8.6 s and about 600 MB before).
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "../sanitizer.hpp"
#include "test_util.hpp"
#include "tokenizer/tokenizer.hpp"

namespace steermoe::tokenizer {
namespace {

namespace fs = std::filesystem;

std::vector<fs::path> sources() {
  const fs::path models = fs::path(STEERMOE_SOURCE_DIR) / "models";
  return {models / "steer-olmoe-tiny", models / "steer-olmoe-small",
          test::oracle_path("tokenizer.json")};
}

size_t peak_rss_kb() {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoul(line.substr(6));
  }
  return 0;
}

TEST(LongRuns, RunByRunMergeGivesTheMergeLoopsIds) {
  const std::vector<std::string> units = {" ", "a", "7", "!", "\n", "\t", "\xc3\xa9", "=", "-"};
  for (const fs::path& source : sources()) {
    const Tokenizer tok = Tokenizer::load(source);
    for (const std::string& unit : units) {
      for (size_t n : {size_t{1024}, size_t{1500}, size_t{4099}}) {
        std::string run;
        for (size_t i = 0; i < n; ++i) run += unit;
        for (const std::string& text : {run, "x" + run + "y", " " + run + " z", run + "ab" + run}) {
          const auto fast = tok.encode(text, {});
          const auto plain = tok.encode(text, {.merge_runs = false});
          ASSERT_EQ(fast, plain) << source << ", '" << unit << "' x " << n;
        }
      }
    }
  }
}

TEST(LongRuns, TenMegabytesOfOneCharacter) {
  const Tokenizer tok = Tokenizer::load(sources()[1]);
  [[maybe_unused]] const size_t before = peak_rss_kb();  // read only outside ASan builds
  for (const char c : {' ', 'a', '7', '!'}) {
    const std::string text = std::string(10'000'000, c) + (c == ' ' ? "a" : " ");
    const auto t0 = std::chrono::steady_clock::now();
    const auto ids = tok.encode(text, {});
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_LT(s, 5.0) << "'" << c << "'";
    EXPECT_EQ(tok.decode(ids), text) << "'" << c << "'";
  }
#ifndef STEERMOE_ASAN
  // The text (10 MB), its byte-level spelling (up to 20 MB) and the ids; not 600 MB. (Under
  // AddressSanitizer freed memory stays in its quarantine: 359 MB measured there.)
  EXPECT_LT(peak_rss_kb() - before, 160u * 1024) << "peak memory grew by that many kB";
#endif
}

}  // namespace
}  // namespace steermoe::tokenizer
