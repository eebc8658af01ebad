// tokenizer.json / tokenizer_config.json / GGUF reading and writing: rejection of bad files
// (message names the file, the field and the expectation), round trips, encode details
// (added-token flags, ignore_merges, errors).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "../json_test_util.hpp"
#include "common/error.hpp"
#include "model/gguf.hpp"
#include "test_util.hpp"
#include "tokenizer/gguf_vocab.hpp"
#include "tokenizer/hf_json.hpp"
#include "tokenizer/tokenizer.hpp"

namespace steermoe::tokenizer {
namespace {

using json = nlohmann::json;
using test::oracle_path;
using ::testing::HasSubstr;

// A tiny valid tokenizer.json: a, b, ab, Ġ and the special <s>.
json small_tokenizer() {
  return steermoe::parse_json_or_throw(R"({
    "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2, "Ġ": 3}, "merges": ["a b"]},
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
    "decoder": {"type": "ByteLevel"},
    "added_tokens": [{"id": 4, "content": "<s>", "special": true}]
  })");
}

// Parsing `doc` must fail with "bad.json: <field>: ..." containing `expected`.
void expect_text_rejected(const std::string& text, const std::string& field,
                          const std::string& expected) {
  try {
    (void)parse_tokenizer_json(text, "bad.json");
    ADD_FAILURE() << "accepted: " << text;
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_THAT(message, HasSubstr("bad.json: " + field + ":")) << message;
    EXPECT_THAT(message, HasSubstr(expected)) << message;
  }
}
void expect_rejected(const json& doc, const std::string& field, const std::string& expected) {
  expect_text_rejected(steermoe::dump_json(doc), field, expected);
}

TEST(TokenizerJson, SmallTokenizerEncodes) {
  const Tokenizer tok(parse_tokenizer_json(steermoe::dump_json(small_tokenizer()), "small.json"));
  EXPECT_EQ(tok.encode("ab a<s>b"), (std::vector<TokenId>{2, 3, 0, 4, 1}));
  EXPECT_EQ(tok.decode(std::vector<TokenId>{2, 3, 0, 4, 1}), "ab a<s>b");
  EXPECT_EQ(tok.decode(std::vector<TokenId>{2, 4, 1}, {.skip_special = true}), "abb");
}

TEST(TokenizerJson, RejectsBadFiles) {
  expect_text_rejected("{", "JSON", "expected a valid JSON document");
  expect_text_rejected("[1, 2]", "top level", "expected a JSON object");
  json doc = small_tokenizer();
  doc.erase("model");
  expect_rejected(doc, "model", "missing");

  doc = small_tokenizer();
  doc["model"].erase("vocab");
  expect_rejected(doc, "model.vocab", "missing");

  doc = small_tokenizer();
  doc["model"]["type"] = "WordPiece";
  expect_rejected(doc, "model.type", "expected \"BPE\"");

  doc = small_tokenizer();
  doc["model"]["merges"] = {"a c"};
  expect_rejected(doc, "model.merges[0]", "\"c\" is not one");

  doc = small_tokenizer();
  doc["model"]["merges"] = {"b a"};
  expect_rejected(doc, "model.merges[0]", "merged token \"ba\"");

  doc = small_tokenizer();
  doc["model"]["merges"] = {"ab"};
  expect_rejected(doc, "model.merges[0]", "expected \"left right\"");

  doc = small_tokenizer();
  doc["model"]["merges"] = json::array({json::array({"a", 1})});
  expect_rejected(doc, "model.merges[0]", "expected \"left right\" or [\"left\", \"right\"]");

  doc = small_tokenizer();
  doc["model"]["vocab"]["b"] = -1;
  expect_rejected(doc, "model.vocab[\"b\"]", "expected a token id in [0,");

  doc = small_tokenizer();
  doc["model"]["vocab"]["b"] = 1u << 30;
  expect_rejected(doc, "model.vocab[\"b\"]", "expected a token id in [0,");

  doc = small_tokenizer();
  doc["model"]["vocab"]["b"] = "1";
  expect_rejected(doc, "model.vocab[\"b\"]", "expected an integer token id");

  doc = small_tokenizer();
  doc["model"]["vocab"]["b"] = 0;
  expect_rejected(doc, "model.vocab[\"b\"]", "expected unique ids, id 0 is also used by \"a\"");

  doc = small_tokenizer();
  doc["model"]["vocab"]["b"] = 100000;
  expect_rejected(doc, "model.vocab", "without gaps");

  doc = small_tokenizer();
  doc["added_tokens"][0]["id"] = 0;
  expect_rejected(doc, "added_tokens[0].id", "model.vocab has \"a\" there");

  doc = small_tokenizer();
  doc["added_tokens"].push_back({{"id", 4}, {"content", "<t>"}});
  expect_rejected(doc, "added_tokens[1].id", "expected unique ids");

  doc = small_tokenizer();
  doc["added_tokens"][0]["content"] = "";
  expect_rejected(doc, "added_tokens[0].content", "non-empty");

  doc = small_tokenizer();
  doc["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Split"}, {"pattern", {{"Regex", "(\\p{L}"}}}, {"behavior", "Isolated"}},
        {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
  expect_rejected(doc, "pre_tokenizer.pretokenizers[0].pattern.Regex", "expected a valid regex");

  doc = small_tokenizer();
  doc["pre_tokenizer"]["pretokenizers"] = json::array();
  doc["pre_tokenizer"]["type"] = "Metaspace";
  expect_rejected(doc, "pre_tokenizer.type", "found \"Metaspace\"");

  doc = small_tokenizer();
  doc["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", json::array()}};
  expect_rejected(doc, "pre_tokenizer", "expected a ByteLevel step");

  doc = small_tokenizer();
  doc["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Split"}, {"pattern", {{"Regex", "a"}}}, {"behavior", "Sideways"}},
        {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
  expect_rejected(doc, "pre_tokenizer.pretokenizers[0].behavior", "found \"Sideways\"");

  doc = small_tokenizer();
  doc["decoder"] = {{"type", "WordPiece"}};
  expect_rejected(doc, "decoder.type", "expected \"ByteLevel\"");

  doc = small_tokenizer();
  doc["normalizer"] = {{"type", "Lowercase"}};
  expect_rejected(doc, "normalizer.type", "expected null or NFC");

  doc = small_tokenizer();
  doc["model"]["byte_fallback"] = true;
  expect_rejected(doc, "model.byte_fallback", "expected false");

  doc = small_tokenizer();
  doc["model"]["unk_token"] = "<unk>";
  expect_rejected(doc, "model.unk_token", "\"<unk>\"");
}

TEST(TokenizerJson, RejectsBadTokenizerConfig) {
  Vocabulary vocab = parse_tokenizer_json(steermoe::dump_json(small_tokenizer()), "small.json");
  try {
    apply_tokenizer_config(R"({"bos_token": "<nope>"})", "config.json", vocab);
    ADD_FAILURE() << "accepted an unknown bos_token";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("config.json: bos_token:"));
    EXPECT_THAT(e.what(), HasSubstr("<nope>"));
  }
  EXPECT_THROW(apply_tokenizer_config("not json", "config.json", vocab), Error);
  EXPECT_THROW(apply_tokenizer_config(R"({"chat_template": 3})", "config.json", vocab), Error);
}

TEST(TokenizerJson, TokenizerConfigSetsSpecialsAndTemplate) {
  Vocabulary vocab = parse_tokenizer_json(steermoe::dump_json(small_tokenizer()), "small.json");
  apply_tokenizer_config(
      R"({"bos_token": {"content": "<s>"}, "eos_token": "<s>", "add_bos_token": true,
      "chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}]})",
      "config.json", vocab);
  EXPECT_EQ(vocab.bos_id, 4);
  EXPECT_EQ(vocab.eos_id, 4);
  EXPECT_TRUE(vocab.add_bos);
  EXPECT_EQ(vocab.chat_template, "D");
  const Tokenizer tok(vocab);
  EXPECT_EQ(tok.encode("ab", {.add_special = true}), (std::vector<TokenId>{4, 2}));
  EXPECT_EQ(tok.encode("ab", {.add_special = false}), (std::vector<TokenId>{2}));
}

TEST(TokenizerJson, TemplateProcessingAddsBos) {
  json doc = small_tokenizer();
  doc["post_processor"] = steermoe::parse_json_or_throw(R"({"type": "Sequence", "processors": [
      {"type": "ByteLevel"},
      {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                                 {"Sequence": {"id": "A", "type_id": 0}}]}]})");
  Vocabulary vocab = parse_tokenizer_json(steermoe::dump_json(doc), "post.json");
  EXPECT_EQ(vocab.bos_id, 4);
  EXPECT_TRUE(vocab.add_bos);
  EXPECT_FALSE(vocab.add_eos);
  EXPECT_EQ(Tokenizer(vocab).encode("ab", {.add_special = true}), (std::vector<TokenId>{4, 2}));
  // tokenizer_config.json has the last word.
  apply_tokenizer_config(R"({"add_bos_token": false})", "config.json", vocab);
  EXPECT_FALSE(vocab.add_bos);
  doc["post_processor"]["processors"][1]["single"][0]["SpecialToken"]["id"] = "<nope>";
  expect_rejected(doc, "post_processor.processors[1].single[0].SpecialToken.id", "\"<nope>\"");
}

TEST(TokenizerJson, AddedTokenStripFlags) {
  json doc = small_tokenizer();
  doc["added_tokens"][0]["lstrip"] = true;
  doc["added_tokens"].push_back(
      {{"id", 5}, {"content", "<r>"}, {"rstrip", true}, {"special", false}});
  const Tokenizer tok(parse_tokenizer_json(steermoe::dump_json(doc), "flags.json"));
  // " <s>" swallows the space on its left; "<r> " the space on its right.
  EXPECT_EQ(tok.encode("a <s>b"), (std::vector<TokenId>{0, 4, 1}));
  EXPECT_EQ(tok.encode("a<r> b"), (std::vector<TokenId>{0, 5, 1}));
  // <r> is not special: matched even when special tokens are not parsed.
  EXPECT_EQ(tok.encode("a<r> b", {.parse_special = false}), (std::vector<TokenId>{0, 5, 1}));
}

TEST(TokenizerJson, IgnoreMergesEmitsWholeWords) {
  json doc = steermoe::parse_json_or_throw(R"({
    "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "c": 2, "bc": 3, "abc": 4}, "merges": ["b c"]},
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true}})");
  EXPECT_EQ(Tokenizer(parse_tokenizer_json(steermoe::dump_json(doc), "x")).encode("abc"),
            (std::vector<TokenId>{0, 3}));
  doc["model"]["ignore_merges"] = true;
  EXPECT_EQ(Tokenizer(parse_tokenizer_json(steermoe::dump_json(doc), "x")).encode("abc"),
            (std::vector<TokenId>{4}));
}

TEST(TokenizerJson, AddPrefixSpace) {
  json doc = small_tokenizer();
  doc["model"]["vocab"]["Ġa"] = 5;
  doc["model"]["merges"].push_back("Ġ a");
  doc["pre_tokenizer"]["add_prefix_space"] = true;
  const Tokenizer tok(parse_tokenizer_json(steermoe::dump_json(doc), "prefix.json"));
  EXPECT_EQ(tok.encode("a"), (std::vector<TokenId>{5}));
  EXPECT_EQ(tok.encode(" a"), (std::vector<TokenId>{5}));
}

TEST(Tokenizer, RejectsBadInputAtRunTime) {
  const Tokenizer tok(parse_tokenizer_json(steermoe::dump_json(small_tokenizer()), "small.json"));
  EXPECT_THROW(tok.encode("a\xff"), Error);
  EXPECT_THROW(tok.decode(std::vector<TokenId>{5}), Error);
  EXPECT_THROW(tok.decode(std::vector<TokenId>{-1}), Error);
}

TEST(Tokenizer, RejectsInconsistentVocabulary) {
  Vocabulary vocab = parse_tokenizer_json(steermoe::dump_json(small_tokenizer()), "small.json");
  Vocabulary duplicate = vocab;
  duplicate.tokens[1] = "a";
  EXPECT_THROW(Tokenizer{duplicate}, Error);
  Vocabulary bad_special = vocab;
  bad_special.eos_id = 99;
  EXPECT_THROW(Tokenizer{bad_special}, Error);
  Vocabulary bad_types = vocab;
  bad_types.types.pop_back();
  EXPECT_THROW(Tokenizer{bad_types}, Error);
}

TEST(TokenizerJson, WriterRoundTripsTheOracle) {
  Vocabulary original = read_tokenizer_json(oracle_path("tokenizer.json"));
  original.bos_id = 995;
  original.eos_id = 995;
  original.pad_id = 996;
  original.chat_template = "{{ messages }}";
  const test::TempDir dir;
  write_hf_tokenizer(original, dir.path());
  const Tokenizer reloaded = Tokenizer::load(dir.path());
  Vocabulary expected = original;
  expected.source = reloaded.vocabulary().source;
  EXPECT_EQ(reloaded.vocabulary(), expected);
  const Tokenizer tok(original);
  const std::string text = "Hello <|endoftext|> wörld 12345 |||EMAIL_ADDRESS|||\n\n  x";
  EXPECT_EQ(reloaded.encode(text), tok.encode(text));
}

TEST(TokenizerJson, WriterUsesPairsWhenATokenHasASpace) {
  Vocabulary vocab;
  vocab.tokens = {"a", " ", "a "};
  vocab.types.assign(3, TokenType::kNormal);
  vocab.merges = {{"a", " "}};
  const json doc = steermoe::parse_json_or_throw(to_tokenizer_json(vocab));
  EXPECT_EQ(doc["model"]["merges"][0], json({"a", " "}));
  EXPECT_EQ(parse_tokenizer_json(steermoe::dump_json(doc), "pairs.json").merges, vocab.merges);
}

model::GgufFile gguf_with(const std::vector<std::pair<std::string, model::GgufValue>>& kv,
                          const std::filesystem::path& path) {
  model::GgufWriter writer(path);
  for (const auto& [key, value] : kv) writer.add(key, value);
  writer.finish();
  return model::GgufFile::open(path);
}

TEST(TokenizerGguf, ExportMatchesLlamaCppConverterKeys) {
  const model::GgufFile oracle = model::GgufFile::open(oracle_path("model.gguf"));
  const Vocabulary vocab = vocabulary_from_gguf(oracle);
  const auto kv = gguf_metadata(vocab);
  for (const auto& [key, value] : kv) {
    SCOPED_TRACE(key);
    ASSERT_TRUE(oracle.has(key));
    if (key == "tokenizer.ggml.token_type") {
      std::vector<int64_t> types;
      for (TokenType type : vocab.types) types.push_back(static_cast<int64_t>(type));
      EXPECT_EQ(oracle.get_int_array(key), types);
    } else if (value.type() == model::GgufType::kUint32) {
      EXPECT_EQ(oracle.get_uint(key), std::get<uint32_t>(value.value));
    } else {
      EXPECT_EQ(oracle.get(key), value);
    }
  }
  // Written and read back through the GGUF writer: the same vocabulary.
  const test::TempDir dir;
  const model::GgufFile written = gguf_with(kv, dir.path() / "tok.gguf");
  Vocabulary reread = vocabulary_from_gguf(written);
  reread.source = vocab.source;
  EXPECT_EQ(reread, vocab);
}

TEST(TokenizerGguf, ExportFromJsonNamesTheFamily) {
  const Vocabulary vocab = read_tokenizer_json(oracle_path("tokenizer.json"));
  const auto kv = gguf_metadata(vocab);
  ASSERT_GE(kv.size(), 2u);
  EXPECT_EQ(kv[1].first, "tokenizer.ggml.pre");
  EXPECT_EQ(std::get<std::string>(kv[1].second.value), "gpt-2");
  Vocabulary custom = vocab;
  custom.splits = {{"\\p{L}+"}};
  custom.pre_name.clear();
  EXPECT_THROW(gguf_metadata(custom), Error);
}

TEST(TokenizerGguf, RejectsUnknownModelAndPre) {
  const test::TempDir dir;
  std::vector<std::pair<std::string, model::GgufValue>> kv = {
      {"tokenizer.ggml.model", model::GgufValue::string("gpt2")},
      {"tokenizer.ggml.pre", model::GgufValue::string("no-such-pre")},
      {"tokenizer.ggml.tokens", model::GgufValue::string_array({"a", "b"})},
  };
  try {
    (void)vocabulary_from_gguf(gguf_with(kv, dir.path() / "pre.gguf"));
    ADD_FAILURE() << "accepted an unknown pre-tokenizer";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("tokenizer.ggml.pre: unknown pre-tokenizer \"no-such-pre\""));
    EXPECT_THAT(e.what(), HasSubstr("qwen2"));
  }
  kv[0].second = model::GgufValue::string("llama");
  try {
    (void)vocabulary_from_gguf(gguf_with(kv, dir.path() / "model.gguf"));
    ADD_FAILURE() << "accepted a SentencePiece model";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("tokenizer.ggml.model: expected \"gpt2\""));
  }
  kv[0].second = model::GgufValue::string("gpt2");
  kv[1].second = model::GgufValue::string("qwen2");
  kv.emplace_back("tokenizer.ggml.merges", model::GgufValue::string_array({"a c"}));
  const Vocabulary vocab = vocabulary_from_gguf(gguf_with(kv, dir.path() / "merge.gguf"));
  EXPECT_THROW(Tokenizer{vocab}, Error);
}

TEST(TokenizerLoad, RejectsMissingPaths) {
  const test::TempDir dir;
  EXPECT_THROW(Tokenizer::load(dir.path() / "nothing.json"), Error);
  EXPECT_THROW(Tokenizer::load(dir.path()), Error);  // a folder without tokenizer.json
  test::write_file(dir.path() / "tokenizer.json", "not json");
  try {
    (void)Tokenizer::load(dir.path());
    ADD_FAILURE() << "accepted a broken tokenizer.json";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr((dir.path() / "tokenizer.json").string() + ": JSON:"));
  }
}

}  // namespace
}  // namespace steermoe::tokenizer
