// Every case of the llama.cpp oracle (tests/data/oracle/tokenizer/cases.json) from both
// tokenizer.json and model.gguf: identical ids (with and without special-token parsing), the
// stored token strings, and decode(encode(text)) == text.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "../json_test_util.hpp"
#include "test_util.hpp"
#include "tokenizer/hf_json.hpp"
#include "tokenizer/tokenizer.hpp"

namespace steermoe::tokenizer {
namespace {

using json = nlohmann::json;
using test::oracle_path;

struct Case {
  std::string name;
  std::string text;
  std::vector<TokenId> ids;
  std::vector<TokenId> ids_special_parsed;
  std::vector<std::string> token_strings;
  std::string detokenized;  // llama_detokenize, with llama.cpp's clean_spaces
};

const std::vector<Case>& cases() {
  static const std::vector<Case> all = [] {
    const json root = steermoe::parse_json_or_throw(test::read_file(oracle_path("cases.json")));
    std::vector<Case> out;
    for (const json& c : root.at("cases")) {
      Case item{c.at("name"),
                c.at("text"),
                c.at("ids").get<std::vector<TokenId>>(),
                {},
                c.at("token_strings").get<std::vector<std::string>>(),
                c.at("detokenized")};
      item.ids_special_parsed =
          c.contains("ids_if_special_tokens_parsed")
              ? c.at("ids_if_special_tokens_parsed").get<std::vector<TokenId>>()
              : item.ids;
      out.push_back(std::move(item));
    }
    return out;
  }();
  return all;
}

void expect_matches_oracle(const Tokenizer& tok, const std::string& label) {
  ASSERT_EQ(tok.size(), 1000u) << label;
  ASSERT_EQ(cases().size(), 40u);
  size_t special_cases = 0;
  size_t cleaned_cases = 0;
  for (const Case& c : cases()) {
    SCOPED_TRACE(label + " / " + c.name);
    const std::vector<TokenId> plain = tok.encode(c.text, {.parse_special = false});
    EXPECT_EQ(plain, c.ids);
    const std::vector<TokenId> parsed = tok.encode(c.text, {.parse_special = true});
    EXPECT_EQ(parsed, c.ids_special_parsed);
    if (c.ids_special_parsed != c.ids) ++special_cases;
    EXPECT_EQ(tok.decode(plain), c.text);
    EXPECT_EQ(tok.decode(parsed), c.text);
    EXPECT_EQ(tok.decode(plain, {.clean_spaces = true}), c.detokenized);
    if (c.detokenized != c.text) ++cleaned_cases;
    std::vector<std::string> strings;
    for (TokenId id : plain) strings.push_back(tok.vocabulary().tokens[id]);
    EXPECT_EQ(strings, c.token_strings);
  }
  EXPECT_EQ(cleaned_cases, 2u) << "clean_spaces changes space_before_punct and apostrophes";
  EXPECT_EQ(special_cases, 1u) << "the oracle has exactly one case where special parsing differs";
}

TEST(TokenizerOracle, TokenizerJsonMatchesLlamaCpp) {
  const Tokenizer tok = Tokenizer::load(oracle_path("tokenizer.json"));
  EXPECT_EQ(tok.vocabulary().pre_name, "gpt-2");
  expect_matches_oracle(tok, "tokenizer.json");
}

TEST(TokenizerOracle, GgufMatchesLlamaCpp) {
  const Tokenizer tok = Tokenizer::load(oracle_path("model.gguf"));
  EXPECT_EQ(tok.vocabulary().pre_name, "olmo");
  EXPECT_EQ(tok.bos(), 995);
  EXPECT_EQ(tok.eos(), 995);
  EXPECT_EQ(tok.vocabulary().pad_id, 996);
  EXPECT_EQ(tok.vocabulary().types[995], TokenType::kControl);
  EXPECT_EQ(tok.vocabulary().types[999], TokenType::kUserDefined);
  expect_matches_oracle(tok, "model.gguf");
}

TEST(TokenizerOracle, GgufAndJsonDescribeTheSameVocabulary) {
  const Tokenizer from_json = Tokenizer::load(oracle_path("tokenizer.json"));
  const Tokenizer from_gguf = Tokenizer::load(oracle_path("model.gguf"));
  EXPECT_EQ(from_json.vocabulary().tokens, from_gguf.vocabulary().tokens);
  EXPECT_EQ(from_json.vocabulary().types, from_gguf.vocabulary().types);
  EXPECT_EQ(from_json.vocabulary().merges, from_gguf.vocabulary().merges);
}

// The same tokenizer written the way GPT-2 and OLMo ship it: ByteLevel(use_regex=true) with the
// regex implied, and (independently) merges as [a, b] pairs.
TEST(TokenizerOracle, ByteLevelUseRegexAndPairMergesForms) {
  json doc = steermoe::parse_json_or_throw(test::read_file(oracle_path("tokenizer.json")));
  doc["pre_tokenizer"] = {{"type", "ByteLevel"},
                          {"add_prefix_space", false},
                          {"trim_offsets", true},
                          {"use_regex", true}};
  json pairs = json::array();
  for (const json& merge : doc["model"]["merges"]) {
    const std::string line = merge.get<std::string>();
    const size_t space = line.find(' ');
    pairs.push_back({line.substr(0, space), line.substr(space + 1)});
  }
  doc["model"]["merges"] = pairs;
  const Tokenizer tok(parse_tokenizer_json(steermoe::dump_json(doc), "variant tokenizer.json"));
  ASSERT_EQ(tok.vocabulary().splits.size(), 1u);
  EXPECT_EQ(tok.vocabulary().pre_name, "gpt-2");
  expect_matches_oracle(tok, "use_regex variant");
}

}  // namespace
}  // namespace steermoe::tokenizer
