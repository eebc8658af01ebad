#include "tokenizer/gguf_vocab.hpp"

#include "common/error.hpp"
#include "tokenizer/pre_tokenizer.hpp"

namespace steermoe::tokenizer {
namespace {

std::optional<TokenId> special_id(const model::GgufFile& file, const char* key) {
  const std::optional<uint64_t> id = file.find_uint(key);
  if (!id) return std::nullopt;
  if (*id > static_cast<uint64_t>(INT32_MAX))
    fail(file.name(), key, "expected a token id, found {}", *id);
  return static_cast<TokenId>(*id);
}

}  // namespace

Vocabulary vocabulary_from_gguf(const model::GgufFile& file) {
  const std::string& where = file.name();
  Vocabulary vocab;
  vocab.source = where;

  const std::optional<std::string> model_name = file.find_string("tokenizer.ggml.model");
  if (!model_name) fail(where, "tokenizer.ggml.model", "missing (the file carries no tokenizer)");
  if (*model_name != "gpt2")
    fail(where, "tokenizer.ggml.model", "expected \"gpt2\" (byte-level BPE), found \"{}\"",
         *model_name);

  const std::optional<std::string> pre = file.find_string("tokenizer.ggml.pre");
  if (!pre) fail(where, "tokenizer.ggml.pre", "missing; expected one of: {}", known_family_names());
  const PreTokenizerFamily* family = find_family_by_name(*pre);
  if (family == nullptr)
    fail(where, "tokenizer.ggml.pre", "unknown pre-tokenizer \"{}\"; expected one of: {}", *pre,
         known_family_names());
  vocab.pre_name = *pre;
  vocab.splits = splits_of(*family);
  vocab.ignore_merges = family->ignore_merges;

  vocab.tokens = file.get_string_array("tokenizer.ggml.tokens");
  const size_t n = vocab.tokens.size();
  if (file.has("tokenizer.ggml.token_type")) {
    const std::vector<int64_t> types = file.get_int_array("tokenizer.ggml.token_type");
    if (types.size() != n)
      fail(where, "tokenizer.ggml.token_type", "expected {} entries (one per token), found {}", n,
           types.size());
    vocab.types.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      if (types[i] < 0 || types[i] > static_cast<int64_t>(TokenType::kByte))
        fail(where, "tokenizer.ggml.token_type", "token {}: expected a type 0..6, found {}", i,
             types[i]);
      vocab.types.push_back(static_cast<TokenType>(types[i]));
    }
  } else {
    vocab.types.assign(n, TokenType::kNormal);
  }

  if (file.has("tokenizer.ggml.merges")) {
    const std::vector<std::string> merges = file.get_string_array("tokenizer.ggml.merges");
    vocab.merges.reserve(merges.size());
    for (size_t i = 0; i < merges.size(); ++i) {
      // llama.cpp splits at the first space after the first character.
      const size_t space = merges[i].size() > 1 ? merges[i].find(' ', 1) : std::string::npos;
      if (space == std::string::npos || space + 1 >= merges[i].size())
        fail(where, "tokenizer.ggml.merges", "merge {}: expected \"left right\", found \"{}\"", i,
             merges[i]);
      vocab.merges.emplace_back(merges[i].substr(0, space), merges[i].substr(space + 1));
    }
  }

  vocab.bos_id = special_id(file, "tokenizer.ggml.bos_token_id");
  vocab.eos_id = special_id(file, "tokenizer.ggml.eos_token_id");
  vocab.pad_id = special_id(file, "tokenizer.ggml.padding_token_id");
  vocab.unk_id = special_id(file, "tokenizer.ggml.unknown_token_id");
  vocab.add_bos =
      file.find_bool("tokenizer.ggml.add_bos_token").value_or(family->add_bos) && vocab.bos_id;
  vocab.add_eos = file.find_bool("tokenizer.ggml.add_eos_token").value_or(false) && vocab.eos_id;
  vocab.chat_template = file.find_string("tokenizer.chat_template").value_or("");
  return vocab;
}

std::vector<std::pair<std::string, model::GgufValue>> gguf_metadata(const Vocabulary& vocab) {
  const std::string where = vocab.source.empty() ? "vocabulary" : vocab.source;
  if (vocab.pre_name.empty())
    fail(where, "pre-tokenizer",
         "expected a regex sequence llama.cpp can name (one of: {}); this one has no "
         "tokenizer.ggml.pre name",
         known_family_names());
  if (vocab.add_prefix_space)
    fail(where, "pre-tokenizer", "add_prefix_space is not expressible in GGUF for byte-level BPE");
  std::vector<std::pair<std::string, model::GgufValue>> kv;
  kv.emplace_back("tokenizer.ggml.model", model::GgufValue::string("gpt2"));
  kv.emplace_back("tokenizer.ggml.pre", model::GgufValue::string(vocab.pre_name));
  kv.emplace_back("tokenizer.ggml.tokens", model::GgufValue::string_array(vocab.tokens));
  std::vector<int32_t> types;
  types.reserve(vocab.types.size());
  for (TokenType type : vocab.types) types.push_back(static_cast<int32_t>(type));
  kv.emplace_back("tokenizer.ggml.token_type", model::GgufValue::i32_array(types));
  std::vector<std::string> merges;
  merges.reserve(vocab.merges.size());
  for (const auto& [left, right] : vocab.merges) {
    if (left.empty() || left.find(' ') != std::string::npos || right.find(' ') != std::string::npos)
      fail(where, "merges", "merge '{}' + '{}': a side with a space cannot be written as \"a b\"",
           left, right);
    merges.push_back(left + " " + right);
  }
  kv.emplace_back("tokenizer.ggml.merges", model::GgufValue::string_array(merges));
  const auto add_id = [&](const char* key, const std::optional<TokenId>& id) {
    if (id) kv.emplace_back(key, model::GgufValue::u32(static_cast<uint32_t>(*id)));
  };
  add_id("tokenizer.ggml.bos_token_id", vocab.bos_id);
  add_id("tokenizer.ggml.eos_token_id", vocab.eos_id);
  add_id("tokenizer.ggml.unknown_token_id", vocab.unk_id);
  add_id("tokenizer.ggml.padding_token_id", vocab.pad_id);
  kv.emplace_back("tokenizer.ggml.add_bos_token", model::GgufValue::boolean(vocab.add_bos));
  kv.emplace_back("tokenizer.ggml.add_eos_token", model::GgufValue::boolean(vocab.add_eos));
  if (!vocab.chat_template.empty())
    kv.emplace_back("tokenizer.chat_template", model::GgufValue::string(vocab.chat_template));
  return kv;
}

}  // namespace steermoe::tokenizer
