// `steermoe tokenize` / `steermoe detokenize` end to end (runs the built binary).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "../cli_runner.hpp"
#include "../json_test_util.hpp"
#include "test_util.hpp"

namespace steermoe::tokenizer {
namespace {

using Result = steermoe::test_support::CliResult;
Result run(const std::string& arguments) {
  return steermoe::test_support::run_cli(arguments);
}

class TokenizeCli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(STEERMOE_BINARY)) GTEST_FAIL() << "steermoe binary not built";
  }
  const std::string json_ = test::oracle_path("tokenizer.json").string();
  const std::string gguf_ = test::oracle_path("model.gguf").string();
};

TEST_F(TokenizeCli, TokenizePrintsJsonIds) {
  // Oracle case "hello".
  for (const std::string& model : {json_, gguf_}) {
    const Result r = run("tokenize -m " + model + " --text 'Hello world'");
    ASSERT_EQ(r.status, 0) << r.output;
    EXPECT_EQ(steermoe::parse_json_or_throw(r.output),
              steermoe::parse_json_or_throw("[72, 101, 360, 111, 278, 269, 602]"))
        << r.output;
  }
}

TEST_F(TokenizeCli, SpecialParsingFlag) {
  // Oracle case "special_text_not_parsed".
  const nlohmann::json cases =
      steermoe::parse_json_or_throw(test::read_file(test::oracle_path("cases.json")));
  nlohmann::json expected;
  for (const auto& c : cases["cases"])
    if (c["name"] == "special_text_not_parsed") expected = c;
  ASSERT_FALSE(expected.is_null());
  const test::TempDir dir;
  test::write_file(dir.path() / "in.txt", expected["text"].get<std::string>());
  const std::string input = " --file " + (dir.path() / "in.txt").string();
  Result r = run("tokenize -m " + gguf_ + input + " --no-parse-special");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(steermoe::parse_json_or_throw(r.output), expected["ids"]);
  r = run("tokenize -m " + gguf_ + input);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(steermoe::parse_json_or_throw(r.output), expected["ids_if_special_tokens_parsed"]);
}

TEST_F(TokenizeCli, DetokenizePrintsText) {
  const Result r = run("detokenize -m " + json_ + " --ids 72,101,360,111,278,269,602,995");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(r.output, "Hello world<|endoftext|>");
}

TEST_F(TokenizeCli, FileRoundTrip) {
  // Every oracle text joined: tokenize --file, then detokenize --ids-file gives the bytes back.
  const nlohmann::json cases =
      steermoe::parse_json_or_throw(test::read_file(test::oracle_path("cases.json")));
  std::string text;
  for (const auto& c : cases["cases"]) text += c["text"].get<std::string>() + "\n";
  const test::TempDir dir;
  test::write_file(dir.path() / "in.txt", text);
  const Result ids = run("tokenize -m " + gguf_ + " --file " + (dir.path() / "in.txt").string());
  ASSERT_EQ(ids.status, 0) << ids.output;
  EXPECT_GT(steermoe::parse_json_or_throw(ids.output).size(), 100u);
  test::write_file(dir.path() / "ids.json", ids.output);
  const Result back =
      run("detokenize -m " + json_ + " --ids-file " + (dir.path() / "ids.json").string());
  ASSERT_EQ(back.status, 0) << back.output;
  EXPECT_EQ(back.output, text);
}

TEST_F(TokenizeCli, ErrorsExitNonZeroWithMessage) {
  Result r = run("detokenize -m " + json_ + " --ids 1,x");
  EXPECT_NE(r.status, 0);
  EXPECT_THAT(r.output, ::testing::HasSubstr("--ids"));
  r = run("detokenize -m " + json_ + " --ids 5000");
  EXPECT_NE(r.status, 0);
  EXPECT_THAT(r.output, ::testing::HasSubstr("expected an id in [0, 1000)"));
  r = run("tokenize -m /nonexistent/tokenizer.json --text hi");
  EXPECT_NE(r.status, 0);
  EXPECT_THAT(r.output, ::testing::HasSubstr("/nonexistent/tokenizer.json"));
  r = run("tokenize -m " + json_);
  EXPECT_NE(r.status, 0);
  EXPECT_THAT(r.output, ::testing::HasSubstr("expected --text or --file"));
}

}  // namespace
}  // namespace steermoe::tokenizer
