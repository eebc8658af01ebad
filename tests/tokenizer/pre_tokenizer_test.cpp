// Split regex families and split behaviours on hand-worked examples.
#include "tokenizer/pre_tokenizer.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>

#include "common/error.hpp"
#include "tokenizer/byte_level.hpp"

namespace steermoe::tokenizer {
namespace {

using ::testing::ElementsAre;

std::vector<std::string> pieces(const std::vector<SplitRule>& rules, std::string_view text) {
  const PreTokenizer pre(rules, "test");
  std::vector<std::string> out;
  for (const auto& [b, e] : pre.split(text)) out.emplace_back(text.substr(b, e - b));
  return out;
}

std::vector<std::string> family_pieces(std::string_view name, std::string_view text) {
  const PreTokenizerFamily* family = find_family_by_name(name);
  EXPECT_NE(family, nullptr) << name;
  return family ? pieces(splits_of(*family), text) : std::vector<std::string>{};
}

TEST(PreTokenizer, Gpt2Family) {
  EXPECT_THAT(family_pieces("gpt-2", "Hello world's  12345 !!x\n"),
              ElementsAre("Hello", " world", "'s", " ", " 12345", " !!", "x", "\n"));
  // Lookahead (?!\S): the last space of a run goes with the next word.
  EXPECT_THAT(family_pieces("olmo", "a   b"), ElementsAre("a", "  ", " b"));
  // Case-sensitive contractions in GPT-2: "'S" is not one.
  EXPECT_THAT(family_pieces("gpt-2", "IT'S"), ElementsAre("IT", "'", "S"));
}

TEST(PreTokenizer, Llama3Family) {
  // Digits in groups of three, case-insensitive contractions, punctuation keeps newlines.
  EXPECT_THAT(family_pieces("llama-bpe", "I'M 1234567 ok?!\n\nhi"),
              ElementsAre("I", "'M", " ", "123", "456", "7", " ok", "?!\n\n", "hi"));
  EXPECT_TRUE(find_family_by_name("llama-bpe")->ignore_merges);
}

TEST(PreTokenizer, Qwen2Family) {
  // Single digits; a non-letter prefix joins the letters after it.
  EXPECT_THAT(family_pieces("qwen2", "x=12 IT'S\tgo"),
              ElementsAre("x", "=", "1", "2", " IT", "'S", "\tgo"));
}

TEST(PreTokenizer, DeepseekV3Family) {
  EXPECT_THAT(family_pieces("deepseek-v3", "abc 12345 中文"),
              ElementsAre("abc", " ", "123", "45", " ", "中文"));
}

TEST(PreTokenizer, KimiK2ClassIntersectionIsTranslated) {
  // Camel case splits, Han is kept apart from other letters.
  EXPECT_THAT(family_pieces("kimi-k2", "HelloWorld 中文ABc"),
              ElementsAre("Hello", "World", " ", "中文", "ABc"));
  EXPECT_EQ(pcre_pattern(R"([\p{L}&&[^\p{Han}]]+)"), R"((?:(?![\p{Han}])[\p{L}])+)");
}

TEST(PreTokenizer, UnicodeClasses) {
  // \p{L} covers Greek and Cyrillic, \p{N} covers superscripts; NBSP is whitespace.
  EXPECT_THAT(family_pieces("gpt-2", "Ωmega42 x² мир\u00a0a"),
              ElementsAre("Ωmega", "42", " x", "²", " мир", "\u00a0", "a"));
}

TEST(PreTokenizer, SplitBehaviours) {
  const auto rule = [](SplitBehavior behavior, bool invert = false) {
    return std::vector<SplitRule>{{"-", behavior, invert}};
  };
  EXPECT_THAT(pieces(rule(SplitBehavior::kIsolated), "a--b"), ElementsAre("a", "-", "-", "b"));
  EXPECT_THAT(pieces(rule(SplitBehavior::kRemoved), "a--b"), ElementsAre("a", "b"));
  EXPECT_THAT(pieces(rule(SplitBehavior::kMergedWithPrevious), "a--b"),
              ElementsAre("a-", "-", "b"));
  EXPECT_THAT(pieces(rule(SplitBehavior::kMergedWithNext), "a--b"), ElementsAre("a", "-", "-b"));
  EXPECT_THAT(pieces(rule(SplitBehavior::kContiguous), "a--b"), ElementsAre("a", "--", "b"));
  EXPECT_THAT(pieces(rule(SplitBehavior::kRemoved, true), "a--b"), ElementsAre("-", "-"));
  // Rules apply in sequence to the pieces of the previous one.
  EXPECT_THAT(
      pieces({{"b+", SplitBehavior::kIsolated, false}, {"a", SplitBehavior::kRemoved, false}},
             "abba"),
      ElementsAre("bb"));
}

TEST(PreTokenizer, BadRegexNamesFieldAndPattern) {
  try {
    Regex("(unclosed", "file.json", "pre_tokenizer.pattern.Regex");
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("file.json: pre_tokenizer.pattern.Regex:"));
    EXPECT_THAT(e.what(), ::testing::HasSubstr("(unclosed"));
  }
}

TEST(PreTokenizer, CatastrophicBacktrackingFailsCleanly) {
  const PreTokenizer pre({{"(a+)+$", SplitBehavior::kIsolated, false}}, "test");
  EXPECT_THROW(pre.split(std::string(5000, 'a') + "!"), Error);
}

// Long runs of one code point are matched shortened and their middle restored: the pieces are
// exactly those of matching the text as it is.
TEST(PreTokenizer, LongRunsGiveThePiecesOfTheTextAsItIs) {
  const std::vector<std::string> units = {
      " ", "a", "7", "!", "\n", "\t", "\xc3\xa9", "\xe4\xb8\xad", "'"};
  const std::vector<std::string> before = {"", "x", "1", " ", "Hello ", "\n", "12"};
  const std::vector<std::string> after = {"", "a", " b", "9", "!", "\n"};
  int shortened = 0;
  for (const PreTokenizerFamily& family : pre_tokenizer_families()) {
    const PreTokenizer pre(splits_of(family), "test");
    for (const std::string& unit : units) {
      for (size_t n : {size_t{4096}, size_t{4157}, size_t{6007}}) {
        std::string run;
        for (size_t i = 0; i < n; ++i) run += unit;
        for (size_t k = 0; k < before.size(); ++k) {
          const std::string& a = after[(k + n) % after.size()];
          const std::string text = before[k] + run + a + (k % 3 == 0 ? " and " + run + "z" : "");
          size_t runs = 0;
          ASSERT_EQ(pre.split(text, true, &runs), pre.split(text, /*shorten_runs=*/false))
              << family.name << ", unit '" << unit << "' x " << n << ", before '" << before[k]
              << "', after '" << a << "'";
          // Matched shortened (the test would compare the reference with itself otherwise).
          EXPECT_EQ(runs, k % 3 == 0 ? 2u : 1u) << family.name << ", unit '" << unit << "'";
          ++shortened;
        }
      }
    }
  }
  EXPECT_GT(shortened, 900);
}

// 10 MB of one code point: every family splits it quickly (matching it as it is exceeds
// PCRE2's limits for four of the five).
TEST(PreTokenizer, TenMegabytesOfOneCodePoint) {
  const size_t n = 10'000'000;
  for (const PreTokenizerFamily& family : pre_tokenizer_families()) {
    const PreTokenizer pre(splits_of(family), "test");
    const auto t0 = std::chrono::steady_clock::now();
    const auto spaces = pre.split(std::string(n, ' ') + "a");
    const auto digits = pre.split(std::string(n, '7'));
    const auto letters = pre.split(std::string(n, 'a') + " ");
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_LT(s, 10.0) << family.name;
    // The spaces but the last are one piece; the last one goes with the letter.
    ASSERT_EQ(spaces.size(), 2u) << family.name;
    EXPECT_EQ(spaces[0], std::make_pair(size_t{0}, n - 1)) << family.name;
    const size_t per_digit_piece = family.name == "gpt-2" ? n : family.name == "qwen2" ? 1 : 3;
    EXPECT_EQ(digits.size(), (n + per_digit_piece - 1) / per_digit_piece) << family.name;
    EXPECT_EQ(letters.front(), std::make_pair(size_t{0}, n)) << family.name;
  }
}

TEST(PreTokenizer, FamiliesAreRecognisedFromTheirRegexes) {
  for (const PreTokenizerFamily& family : pre_tokenizer_families()) {
    EXPECT_EQ(find_family_by_splits(splits_of(family)), &family) << family.name;
    for (const auto& alternative : family.equivalent_patterns) {
      std::vector<SplitRule> rules;
      for (std::string_view p : alternative) rules.push_back({std::string(p)});
      EXPECT_EQ(find_family_by_splits(rules), &family) << family.name;
    }
  }
  EXPECT_EQ(find_family_by_name("no-such-family"), nullptr);
}

TEST(ByteLevel, MapRoundTripsEveryByte) {
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  const std::string spelled = to_byte_level(all);
  EXPECT_EQ(from_byte_level(spelled), all);
  EXPECT_EQ(to_byte_level(" "), "Ġ");
  EXPECT_EQ(to_byte_level("\n"), "Ċ");
  EXPECT_EQ(to_byte_level("A"), "A");
  EXPECT_FALSE(find_invalid_utf8(spelled).has_value());
}

TEST(ByteLevel, Utf8Validation) {
  EXPECT_FALSE(find_invalid_utf8("héllo 中文 😀").has_value());
  EXPECT_EQ(find_invalid_utf8("ab\xff"), 2u);
  EXPECT_EQ(find_invalid_utf8("\xc0\xaf"), 0u);          // overlong
  EXPECT_EQ(find_invalid_utf8("x\xed\xa0\x80"), 1u);     // surrogate
  EXPECT_EQ(find_invalid_utf8("\xf4\x90\x80\x80"), 0u);  // above U+10FFFF
  EXPECT_EQ(find_invalid_utf8("\xe4\xb8"), 0u);          // truncated
}

}  // namespace
}  // namespace steermoe::tokenizer
