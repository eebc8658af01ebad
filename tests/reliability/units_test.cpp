// Unit tests of the shared reliability helpers (src/common) and the thread-pool cleanup.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

#include "common/error.hpp"
#include "common/json_input.hpp"
#include "common/memory_limit.hpp"
#include "common/progress.hpp"
#include "kernels/thread_pool.hpp"

namespace steermoe {
namespace {

using testing::HasSubstr;

std::string nested(int depth) {
  return std::string(static_cast<size_t>(depth), '[') + std::string(static_cast<size_t>(depth), ']');
}

TEST(JsonInput, DepthCheckedBeforeParsing) {
  EXPECT_NO_THROW(parse_json(nested(kMaxJsonDepth), "x.json"));
  try {
    parse_json(nested(1000000), "x.json");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("x.json: JSON: expected arrays/objects nested at most 64"));
  }
  // Brackets inside strings (with escaped quotes) do not count.
  const std::string in_string = "[\"\\\"" + std::string(500, '[') + "\"]";
  EXPECT_NO_THROW(parse_json(in_string, "s.json"));
  EXPECT_THROW(parse_json("{\"a\": [1, 2", "t.json"), Error);
}

TEST(JsonInput, ExcerptIsShort) {
  const nlohmann::json big = std::string(100000, 'x');
  const std::string e = json_excerpt(big);
  EXPECT_LT(e.size(), 120u);
  EXPECT_THAT(e, HasSubstr("truncated"));
  nlohmann::json array = nlohmann::json::array();
  for (int i = 0; i < 100000; ++i) array.push_back(i);
  EXPECT_LT(json_excerpt(array).size(), 120u);
  EXPECT_EQ(json_excerpt(nlohmann::json{{"a", 1}}), "{\"a\":1}");
  // Invalid UTF-8 in a key or a value is replaced, not thrown (a key's was: fuzz_trace_meta).
  const std::string bad = "k\xd4";
  EXPECT_NO_THROW(json_excerpt(nlohmann::json{{bad, 1}}));
  EXPECT_NO_THROW(json_excerpt(nlohmann::json{{"a", bad}}));
  EXPECT_NO_THROW(json_excerpt(nlohmann::ordered_json{{bad, bad}}));
}

TEST(MemoryLimit, RefusesBeyondTheCap) {
  EXPECT_NO_THROW(check_allocation("w", "f", 1024, "a test buffer", "lower it"));
  EXPECT_EQ(saturating_mul(uint64_t{1} << 40, uint64_t{1} << 40), UINT64_MAX);
  try {
    check_allocation("w", "-c", UINT64_MAX, "a test buffer", "lower -c");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("w: -c: a test buffer needs more than 16 EiB"));
    EXPECT_THAT(e.what(), HasSubstr("lower -c"));
  }
}

TEST(Progress, LineHasRateAndEta) {
  set_progress_quiet(true);  // nothing printed by this test
  Progress p("perplexity", 1000, "tokens");
  p.advance(250);
  const std::string line = p.line(5.0);
  EXPECT_THAT(line, HasSubstr("perplexity: 250/1000 tokens (25.0%)"));
  EXPECT_THAT(line, HasSubstr("50 tokens/s"));
  EXPECT_THAT(line, HasSubstr("ETA 15s"));
  set_progress_quiet(false);
}

// In a log (stderr not a terminal), the last count's line is printed once: finish() repeated
// it when advance() had just printed it (make-model's "634/634 MiB (100.0%)" twice).
TEST(Progress, FinalLineIsNotRepeatedInALog) {
  ::testing::internal::CaptureStderr();
  {
    Progress p("write", 10, "items");
    std::this_thread::sleep_for(std::chrono::milliseconds(2100));  // past the quiet start
    p.advance(10);
    p.finish();
  }
  const std::string err = ::testing::internal::GetCapturedStderr();
  const std::string line = "write: 10/10 items (100.0%)";
  const size_t first = err.find(line);
  ASSERT_NE(first, std::string::npos) << err;
  EXPECT_EQ(err.find(line, first + 1), std::string::npos) << err;
}

// A pool whose constructor cannot start a thread joins the ones it started and throws a clear
// Error (before the fix: std::terminate, "terminate called without an active exception").
TEST(ThreadPool, SpawnFailureIsACleanError) {
  kernels::ThreadPool::fail_spawn_for_testing(3);
  try {
    kernels::ThreadPool pool(4);
    kernels::ThreadPool::fail_spawn_for_testing(0);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    kernels::ThreadPool::fail_spawn_for_testing(0);
    EXPECT_THAT(e.what(), HasSubstr("cannot start thread 4 of 4"));
  }
  kernels::ThreadPool pool(4);  // the hook is off again: a normal pool works
  int sum = 0;
  pool.parallel_for(4, [&](size_t b, size_t e) { __atomic_add_fetch(&sum, static_cast<int>(e - b), __ATOMIC_RELAXED); });
  EXPECT_EQ(sum, 4);
}

}  // namespace
}  // namespace steermoe
