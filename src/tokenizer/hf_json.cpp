#include "tokenizer/hf_json.hpp"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "common/error.hpp"
#include "common/input_file.hpp"
#include "common/json_input.hpp"
#include "tokenizer/byte_level.hpp"
#include "tokenizer/pre_tokenizer.hpp"

namespace steermoe::tokenizer {
namespace {

using json = nlohmann::json;
using ordered_json = nlohmann::ordered_json;

// Ids are dense in every real tokenizer; a few holes are filled with unused placeholders (as
// llama.cpp's converter does), a huge id is a broken file.
constexpr int64_t kMaxTokenId = (int64_t{1} << 24) - 1;
constexpr size_t kMaxHoles = 1024;

std::string read_text_file(const std::filesystem::path& path) {
  // Regular files only, never blocking on a FIFO; bounded size (common/input_file.hpp).
  return read_input_file(path, "a tokenizer file", kMaxJsonFileBytes);
}

json parse_json(std::string_view text, const std::string& where) {
  check_json_depth(text, where);  // before anything can recurse over a hostile nesting
  try {
    return parse_json_or_throw(text);
  } catch (const json::exception& e) {
    fail(where, "JSON", "expected a valid JSON document: {}", e.what());
  }
}

// Typed access to optional members with "<where>: <field>: expected ..." errors.
class Reader {
 public:
  explicit Reader(std::string where) : where_(std::move(where)) {}
  const std::string& where() const { return where_; }

  const json* member(const json& object, const char* key) const {
    const auto it = object.find(key);
    return it == object.end() ? nullptr : &*it;
  }
  const json& require(const json& object, const char* key, const std::string& field) const {
    const json* value = member(object, key);
    if (value == nullptr) fail(where_, field, "missing");
    return *value;
  }
  const json& require_object(const json& object, const char* key, const std::string& field) const {
    const json& value = require(object, key, field);
    if (!value.is_object()) fail(where_, field, "expected an object, found {}", value.type_name());
    return value;
  }
  std::string string(const json& value, const std::string& field) const {
    if (!value.is_string()) fail(where_, field, "expected a string, found {}", value.type_name());
    return value.get<std::string>();
  }
  bool boolean(const json& object, const char* key, bool fallback, const std::string& field) const {
    const json* value = member(object, key);
    if (value == nullptr || value->is_null()) return fallback;
    if (!value->is_boolean())
      fail(where_, field, "expected true or false, found {}", value->type_name());
    return value->get<bool>();
  }
  int64_t token_id(const json& value, const std::string& field) const {
    if (!value.is_number_integer())
      fail(where_, field, "expected an integer token id, found {}", value.type_name());
    if (value.is_number_unsigned()
            ? value.get<uint64_t>() > static_cast<uint64_t>(kMaxTokenId)
            : (value.get<int64_t>() < 0 || value.get<int64_t>() > kMaxTokenId))
      fail(where_, field, "expected a token id in [0, {}], found {}", kMaxTokenId, json_excerpt(value));
    return value.get<int64_t>();
  }

 private:
  std::string where_;
};

// A literal string as a PCRE2 regex (HF Split with {"String": ...}).
std::string escape_regex(std::string_view literal) {
  std::string out;
  for (char c : literal) {
    const auto u = static_cast<unsigned char>(c);
    const bool plain = u >= 0x80 || (u >= '0' && u <= '9') || (u >= 'a' && u <= 'z') ||
                       (u >= 'A' && u <= 'Z') || u == '_';
    if (!plain) out += '\\';
    out += c;
  }
  return out;
}

SplitBehavior parse_behavior(const Reader& r, const json& value, const std::string& field) {
  const std::string name = r.string(value, field);
  if (name == "Isolated") return SplitBehavior::kIsolated;
  if (name == "Removed") return SplitBehavior::kRemoved;
  if (name == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (name == "Contiguous") return SplitBehavior::kContiguous;
  fail(r.where(), field,
       "expected Isolated, Removed, MergedWithPrevious, MergedWithNext or Contiguous, found \"{}\"",
       name);
}

const char* behavior_name(SplitBehavior behavior) {
  switch (behavior) {
    case SplitBehavior::kIsolated:
      return "Isolated";
    case SplitBehavior::kRemoved:
      return "Removed";
    case SplitBehavior::kMergedWithPrevious:
      return "MergedWithPrevious";
    case SplitBehavior::kMergedWithNext:
      return "MergedWithNext";
    case SplitBehavior::kContiguous:
      return "Contiguous";
  }
  return "Isolated";
}

struct PreTokenizerState {
  bool saw_byte_level = false;
};

void parse_pre_tokenizer(const Reader& r, const json& node, const std::string& field,
                         Vocabulary& vocab, PreTokenizerState& state, int depth) {
  if (depth > 16) fail(r.where(), field, "expected at most 16 nested Sequence levels");
  if (!node.is_object()) fail(r.where(), field, "expected an object, found {}", node.type_name());
  const std::string type = r.string(r.require(node, "type", field + ".type"), field + ".type");
  if (type == "Sequence") {
    const json& steps = r.require(node, "pretokenizers", field + ".pretokenizers");
    if (!steps.is_array()) fail(r.where(), field + ".pretokenizers", "expected an array");
    for (size_t i = 0; i < steps.size(); ++i)
      parse_pre_tokenizer(r, steps[i], fmt::format("{}.pretokenizers[{}]", field, i), vocab, state,
                          depth + 1);
    return;
  }
  if (state.saw_byte_level)
    fail(r.where(), field,
         "expected ByteLevel to be the last pre-tokenizer step (a {} step after it is not "
         "supported)",
         type);
  if (type == "Split") {
    const json& pattern = r.require(node, "pattern", field + ".pattern");
    SplitRule rule;
    if (pattern.is_object() && pattern.contains("Regex")) {
      rule.pattern = r.string(pattern["Regex"], field + ".pattern.Regex");
    } else if (pattern.is_object() && pattern.contains("String")) {
      rule.pattern = escape_regex(r.string(pattern["String"], field + ".pattern.String"));
    } else {
      fail(r.where(), field + ".pattern", "expected {{\"Regex\": ...}} or {{\"String\": ...}}");
    }
    rule.behavior =
        parse_behavior(r, r.require(node, "behavior", field + ".behavior"), field + ".behavior");
    rule.invert = r.boolean(node, "invert", false, field + ".invert");
    // Compile now so a bad regex is reported against its field.
    Regex(rule.pattern, r.where(), field + ".pattern.Regex");
    vocab.splits.push_back(std::move(rule));
    return;
  }
  if (type == "Digits") {
    const bool individual =
        r.boolean(node, "individual_digits", false, field + ".individual_digits");
    vocab.splits.push_back(
        {individual ? R"(\p{N})" : R"(\p{N}+)", SplitBehavior::kIsolated, false});
    return;
  }
  if (type == "ByteLevel") {
    state.saw_byte_level = true;
    // HF defaults: add_prefix_space true, use_regex true.
    const bool prefix = r.boolean(node, "add_prefix_space", true, field + ".add_prefix_space");
    const bool use_regex = r.boolean(node, "use_regex", true, field + ".use_regex");
    if (prefix) {
      // HF prepends the space to every piece present at this step; steermoe supports the
      // usual case where ByteLevel is the only step (pieces = text between added tokens).
      if (!vocab.splits.empty())
        fail(r.where(), field + ".add_prefix_space",
             "expected false when Split steps come before ByteLevel (not supported)");
      vocab.add_prefix_space = true;
    }
    if (use_regex)
      vocab.splits.push_back({std::string(kGpt2Pattern), SplitBehavior::kIsolated, false});
    return;
  }
  fail(r.where(), field + ".type",
       "expected Sequence, Split, Digits or ByteLevel (byte-level BPE), found \"{}\"", type);
}

void check_normalizer(const Reader& r, const json& node, const std::string& field, int depth) {
  if (node.is_null()) return;
  if (depth > 16 || !node.is_object())
    fail(r.where(), field, "expected null or a normalizer object");
  const std::string type = r.string(r.require(node, "type", field + ".type"), field + ".type");
  if (type == "NFC") return;  // not applied, as llama.cpp does not (matters only for non-NFC text)
  if (type == "Sequence") {
    const json& steps = r.require(node, "normalizers", field + ".normalizers");
    if (!steps.is_array()) fail(r.where(), field + ".normalizers", "expected an array");
    for (size_t i = 0; i < steps.size(); ++i)
      check_normalizer(r, steps[i], fmt::format("{}.normalizers[{}]", field, i), depth + 1);
    return;
  }
  fail(r.where(), field + ".type", "expected null or NFC (byte-level BPE), found \"{}\"", type);
}

void check_decoder(const Reader& r, const json& node) {
  if (node.is_null()) return;
  if (!node.is_object()) fail(r.where(), "decoder", "expected null or an object");
  const std::string type = r.string(r.require(node, "type", "decoder.type"), "decoder.type");
  if (type != "ByteLevel")
    fail(r.where(), "decoder.type", "expected \"ByteLevel\" (byte-level BPE), found \"{}\"", type);
}

// The text a tokenizer_config.json entry names: "x" or {"content": "x", ...}; nullopt for null.
std::optional<std::string> config_token_text(const Reader& r, const json& config, const char* key) {
  const json* value = r.member(config, key);
  if (value == nullptr || value->is_null()) return std::nullopt;
  if (value->is_string()) return value->get<std::string>();
  if (value->is_object())
    return r.string(r.require(*value, "content", std::string(key) + ".content"),
                    std::string(key) + ".content");
  fail(r.where(), key, "expected a string, an object with \"content\" or null, found {}",
       value->type_name());
}

// HF TemplateProcessing (possibly inside a Sequence post-processor): special tokens placed
// before / after the single-sequence template become add_bos / add_eos. Other processors add
// nothing. tokenizer_config.json's add_bos_token / add_eos_token, applied later, win.
void apply_post_processor(const Reader& r, const json& node, const std::string& field,
                          Vocabulary& vocab, int depth) {
  if (node.is_null() || !node.is_object() || depth > 16) return;
  const json* type = r.member(node, "type");
  if (type == nullptr || !type->is_string()) return;
  if (*type == "Sequence") {
    if (const json* list = r.member(node, "processors"); list != nullptr && list->is_array())
      for (size_t i = 0; i < list->size(); ++i)
        apply_post_processor(r, (*list)[i], fmt::format("{}.processors[{}]", field, i), vocab,
                             depth + 1);
    return;
  }
  if (*type != "TemplateProcessing") return;
  const json* single = r.member(node, "single");
  if (single == nullptr || !single->is_array()) return;
  bool seen_sequence = false;
  for (size_t i = 0; i < single->size(); ++i) {
    const json& item = (*single)[i];
    if (!item.is_object()) continue;
    if (item.contains("Sequence")) {
      seen_sequence = true;
      continue;
    }
    const json* special = r.member(item, "SpecialToken");
    if (special == nullptr || !special->is_object()) continue;
    const std::string item_field = fmt::format("{}.single[{}].SpecialToken.id", field, i);
    const std::string text = r.string(r.require(*special, "id", item_field), item_field);
    std::optional<TokenId> id;
    for (size_t t = 0; t < vocab.tokens.size() && !id; ++t)
      if (vocab.tokens[t] == text) id = static_cast<TokenId>(t);
    if (!id)
      fail(r.where(), item_field, "expected a token of the vocabulary, \"{}\" is not one", text);
    if (!seen_sequence) {
      vocab.bos_id = id;
      vocab.add_bos = true;
    } else {
      vocab.eos_id = id;
      vocab.add_eos = true;
    }
  }
}

std::string checked_utf8(const std::string& text, const std::string& what) {
  if (const auto bad = find_invalid_utf8(text))
    fail("tokenizer.json writer", what, "expected valid UTF-8 (JSON), invalid byte at offset {}",
         *bad);
  return text;
}

std::string dump(const ordered_json& document) {
  try {
    return dump_json(document, 2, ' ', false, ordered_json::error_handler_t::strict) + "\n";
  } catch (const ordered_json::exception& e) {
    fail("tokenizer.json writer", "JSON", "cannot serialise: {}", e.what());
  }
}

void write_text_file(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) fail(path.string(), "open", "expected a writable file");
  out << text;
  out.flush();
  if (!out) fail(path.string(), "write", "I/O error while writing");
}

}  // namespace

Vocabulary parse_tokenizer_json(std::string_view json_text, const std::string& where) {
  const Reader r(where);
  const json root = parse_json(json_text, where);
  if (!root.is_object())
    fail(where, "top level", "expected a JSON object, found {}", root.type_name());

  Vocabulary vocab;
  vocab.source = where;

  // ---- model ----
  const json& model = r.require_object(root, "model", "model");
  if (const json* type = r.member(model, "type")) {
    const std::string name = r.string(*type, "model.type");
    if (name != "BPE")
      fail(where, "model.type", "expected \"BPE\" (byte-level BPE), found \"{}\"", name);
  }
  if (r.boolean(model, "byte_fallback", false, "model.byte_fallback"))
    fail(where, "model.byte_fallback", "expected false (byte-level BPE needs no byte fallback)");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const json* value = r.member(model, key);
    if (value != nullptr && !value->is_null() &&
        !(value->is_string() && value->get<std::string>().empty()))
      fail(where, std::string("model.") + key, "expected null or \"\" (not supported), found {}",
           json_excerpt(*value));
  }
  if (const json* dropout = r.member(model, "dropout");
      dropout != nullptr && !dropout->is_null() &&
      !(dropout->is_number() && dropout->get<double>() == 0.0))
    fail(where, "model.dropout", "expected null or 0 (dropout is for training), found {}",
         json_excerpt(*dropout));
  vocab.ignore_merges = r.boolean(model, "ignore_merges", false, "model.ignore_merges");

  const json& model_vocab = r.require_object(model, "vocab", "model.vocab");
  std::unordered_map<int64_t, std::string> text_by_id;
  int64_t max_id = -1;
  for (const auto& [text, id_value] : model_vocab.items()) {
    const std::string field = "model.vocab[\"" + text + "\"]";
    const int64_t id = r.token_id(id_value, field);
    if (text.empty())
      fail(where, "model.vocab", "expected non-empty token strings, found \"\" (id {})", id);
    const auto [it, inserted] = text_by_id.emplace(id, text);
    if (!inserted)
      fail(where, field, "expected unique ids, id {} is also used by \"{}\"", id, it->second);
    max_id = std::max(max_id, id);
  }
  if (text_by_id.empty()) fail(where, "model.vocab", "expected at least one token, found none");

  // ---- added tokens ----
  struct Added {
    int64_t id;
    std::string content;
    bool special;
    AddedTokenOptions options;
  };
  std::vector<Added> added;
  if (const json* list = r.member(root, "added_tokens"); list != nullptr && !list->is_null()) {
    if (!list->is_array())
      fail(where, "added_tokens", "expected an array, found {}", list->type_name());
    std::unordered_set<int64_t> added_ids;
    for (size_t i = 0; i < list->size(); ++i) {
      const std::string field = fmt::format("added_tokens[{}]", i);
      const json& entry = (*list)[i];
      if (!entry.is_object()) fail(where, field, "expected an object, found {}", entry.type_name());
      Added token;
      token.id = r.token_id(r.require(entry, "id", field + ".id"), field + ".id");
      token.content = r.string(r.require(entry, "content", field + ".content"), field + ".content");
      if (token.content.empty()) fail(where, field + ".content", "expected a non-empty string");
      token.special = r.boolean(entry, "special", false, field + ".special");
      token.options.lstrip = r.boolean(entry, "lstrip", false, field + ".lstrip");
      token.options.rstrip = r.boolean(entry, "rstrip", false, field + ".rstrip");
      token.options.single_word = r.boolean(entry, "single_word", false, field + ".single_word");
      if (!added_ids.insert(token.id).second)
        fail(where, field + ".id", "expected unique ids, id {} appears twice in added_tokens",
             token.id);
      if (const auto it = text_by_id.find(token.id);
          it != text_by_id.end() && it->second != token.content)
        fail(where, field + ".id",
             "expected the id of \"{}\" to be free or the same token, model.vocab has \"{}\" there",
             token.content, it->second);
      max_id = std::max(max_id, token.id);
      added.push_back(std::move(token));
    }
  }

  const size_t size = static_cast<size_t>(max_id) + 1;
  // Validate the id range against the number of tokens before allocating the table: a single
  // huge id in a small file must not allocate (or even touch) max_id + 1 entries.
  {
    size_t distinct = text_by_id.size();
    for (const Added& token : added) distinct += text_by_id.count(token.id) == 0 ? 1 : 0;
    if (size - distinct > kMaxHoles)
      fail(where, "model.vocab", "expected token ids 0..{} without gaps, {} ids are undefined",
           size - 1, size - distinct);
  }
  vocab.tokens.assign(size, {});
  vocab.types.assign(size, TokenType::kUnused);
  size_t defined = 0;
  for (const auto& [id, text] : text_by_id) {
    vocab.tokens[id] = text;
    vocab.types[id] = TokenType::kNormal;
    ++defined;
  }
  for (const Added& token : added) {
    if (vocab.types[token.id] == TokenType::kUnused) ++defined;
    vocab.tokens[token.id] = token.content;
    vocab.types[token.id] = token.special ? TokenType::kControl : TokenType::kUserDefined;
    if (token.options != AddedTokenOptions{})
      vocab.added_token_options[static_cast<TokenId>(token.id)] = token.options;
  }
  if (size - defined > kMaxHoles)
    fail(where, "model.vocab", "expected token ids 0..{} without gaps, {} ids are undefined",
         size - 1, size - defined);
  {
    std::unordered_map<std::string_view, size_t> id_by_text;
    for (size_t id = 0; id < size; ++id) {
      if (vocab.types[id] != TokenType::kUnused) id_by_text.emplace(vocab.tokens[id], id);
    }
    for (size_t id = 0; id < size; ++id) {
      if (vocab.types[id] != TokenType::kUnused) continue;
      // Placeholder for an undefined id, spelled as llama.cpp's converter does.
      vocab.tokens[id] = fmt::format("[PAD{}]", id);
      if (id_by_text.contains(vocab.tokens[id]))
        fail(where, "model.vocab",
             "expected ids without gaps; id {} is undefined and its placeholder "
             "name is taken",
             id);
    }
    for (const Added& token : added) {
      const auto it = id_by_text.find(token.content);
      if (it != id_by_text.end() && it->second != static_cast<size_t>(token.id))
        fail(where, "added_tokens", "token \"{}\" has id {} but model.vocab gives it id {}",
             token.content, token.id, it->second);
    }
  }

  // ---- merges ----
  const json& merges = r.require(model, "merges", "model.merges");
  if (!merges.is_array())
    fail(where, "model.merges", "expected an array, found {}", merges.type_name());
  vocab.merges.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const std::string field = fmt::format("model.merges[{}]", i);
    const json& entry = merges[i];
    std::string left, right;
    if (entry.is_string()) {
      const std::string line = entry.get<std::string>();
      const size_t space = line.find(' ');
      if (space == std::string::npos || space == 0 || space + 1 >= line.size() ||
          line.find(' ', space + 1) != std::string::npos)
        fail(where, field, "expected \"left right\" (two tokens, one space), found \"{}\"", line);
      left = line.substr(0, space);
      right = line.substr(space + 1);
    } else if (entry.is_array() && entry.size() == 2 && entry[0].is_string() &&
               entry[1].is_string()) {
      left = entry[0].get<std::string>();
      right = entry[1].get<std::string>();
    } else {
      fail(where, field, "expected \"left right\" or [\"left\", \"right\"], found {}",
           json_excerpt(entry));
    }
    for (const std::string* side : {&left, &right}) {
      if (!model_vocab.contains(*side))
        fail(where, field, "expected tokens of model.vocab, \"{}\" is not one", *side);
    }
    if (!model_vocab.contains(left + right))
      fail(where, field, "expected the merged token \"{}\" in model.vocab", left + right);
    vocab.merges.emplace_back(std::move(left), std::move(right));
  }

  if (const json* unk = r.member(model, "unk_token"); unk != nullptr && !unk->is_null()) {
    const std::string text = r.string(*unk, "model.unk_token");
    if (!model_vocab.contains(text))
      fail(where, "model.unk_token", "expected a token of model.vocab, found \"{}\"", text);
    vocab.unk_id = static_cast<TokenId>(model_vocab[text].get<int64_t>());
  }

  // ---- normalizer, pre-tokenizer, decoder ----
  if (const json* normalizer = r.member(root, "normalizer"))
    check_normalizer(r, *normalizer, "normalizer", 0);
  const json& pre = r.require(root, "pre_tokenizer", "pre_tokenizer");
  if (pre.is_null()) fail(where, "pre_tokenizer", "expected a ByteLevel pre-tokenizer, found null");
  PreTokenizerState state;
  parse_pre_tokenizer(r, pre, "pre_tokenizer", vocab, state, 0);
  if (!state.saw_byte_level)
    fail(where, "pre_tokenizer", "expected a ByteLevel step (only byte-level BPE is supported)");
  if (const json* decoder = r.member(root, "decoder")) check_decoder(r, *decoder);
  if (const json* post = r.member(root, "post_processor"))
    apply_post_processor(r, *post, "post_processor", vocab, 0);

  if (const PreTokenizerFamily* family = find_family_by_splits(vocab.splits);
      family && !vocab.add_prefix_space)
    vocab.pre_name = std::string(family->name);
  return vocab;
}

void apply_tokenizer_config(std::string_view json_text, const std::string& where,
                            Vocabulary& vocab) {
  const Reader r(where);
  const json config = parse_json(json_text, where);
  if (!config.is_object())
    fail(where, "top level", "expected a JSON object, found {}", config.type_name());

  const auto resolve = [&](const char* key, std::optional<TokenId>& target) {
    const std::optional<std::string> text = config_token_text(r, config, key);
    if (!text) return;
    const std::string spelled = to_byte_level(*text);
    for (size_t id = 0; id < vocab.tokens.size(); ++id) {
      const bool added = is_added_type(vocab.types[id]);
      if (vocab.tokens[id] == (added ? *text : spelled)) {
        target = static_cast<TokenId>(id);
        return;
      }
    }
    fail(where, key, "expected a token of the tokenizer, \"{}\" is not one", *text);
  };
  resolve("bos_token", vocab.bos_id);
  resolve("eos_token", vocab.eos_id);
  resolve("pad_token", vocab.pad_id);
  resolve("unk_token", vocab.unk_id);
  vocab.add_bos =
      r.boolean(config, "add_bos_token", vocab.add_bos, "add_bos_token") && vocab.bos_id;
  vocab.add_eos =
      r.boolean(config, "add_eos_token", vocab.add_eos, "add_eos_token") && vocab.eos_id;

  if (const json* chat = r.member(config, "chat_template"); chat != nullptr && !chat->is_null()) {
    if (chat->is_string()) {
      vocab.chat_template = chat->get<std::string>();
    } else if (chat->is_array()) {
      // Named templates: take "default", else the first.
      for (size_t i = 0; i < chat->size(); ++i) {
        const json& entry = (*chat)[i];
        const std::string field = fmt::format("chat_template[{}]", i);
        if (!entry.is_object()) fail(where, field, "expected {{\"name\": ..., \"template\": ...}}");
        const std::string name =
            r.string(r.require(entry, "name", field + ".name"), field + ".name");
        const std::string text =
            r.string(r.require(entry, "template", field + ".template"), field + ".template");
        if (i == 0 || name == "default") vocab.chat_template = text;
        if (name == "default") break;
      }
    } else {
      fail(where, "chat_template", "expected a string or a list of named templates, found {}",
           chat->type_name());
    }
  }
}

Vocabulary read_tokenizer_json(const std::filesystem::path& tokenizer_json) {
  Vocabulary vocab = parse_tokenizer_json(read_text_file(tokenizer_json), tokenizer_json.string());
  const std::filesystem::path config = tokenizer_json.parent_path() / "tokenizer_config.json";
  std::error_code ec;
  if (std::filesystem::is_regular_file(config, ec))
    apply_tokenizer_config(read_text_file(config), config.string(), vocab);
  return vocab;
}

std::string to_tokenizer_json(const Vocabulary& vocab) {
  ordered_json root;
  root["version"] = "1.0";
  root["truncation"] = nullptr;
  root["padding"] = nullptr;

  ordered_json added = ordered_json::array();
  for (size_t id = 0; id < vocab.tokens.size(); ++id) {
    if (!is_added_type(vocab.types[id])) continue;
    AddedTokenOptions options;
    if (const auto it = vocab.added_token_options.find(static_cast<TokenId>(id));
        it != vocab.added_token_options.end())
      options = it->second;
    ordered_json entry;
    entry["id"] = id;
    entry["content"] = checked_utf8(vocab.tokens[id], fmt::format("token {}", id));
    entry["single_word"] = options.single_word;
    entry["lstrip"] = options.lstrip;
    entry["rstrip"] = options.rstrip;
    entry["normalized"] = false;
    entry["special"] = vocab.types[id] == TokenType::kControl;
    added.push_back(std::move(entry));
  }
  root["added_tokens"] = std::move(added);
  root["normalizer"] = nullptr;

  ordered_json byte_level = {{"type", "ByteLevel"},
                             {"add_prefix_space", false},
                             {"trim_offsets", true},
                             {"use_regex", false}};
  if (vocab.add_prefix_space) {
    if (vocab.splits.size() != 1 || vocab.splits[0].pattern != kGpt2Pattern ||
        vocab.splits[0].behavior != SplitBehavior::kIsolated || vocab.splits[0].invert)
      fail("tokenizer.json writer", "pre_tokenizer",
           "add_prefix_space is only expressible with the GPT-2 regex (ByteLevel use_regex=true)");
    byte_level["add_prefix_space"] = true;
    byte_level["use_regex"] = true;
    root["pre_tokenizer"] = byte_level;
  } else {
    ordered_json steps = ordered_json::array();
    for (const SplitRule& rule : vocab.splits) {
      steps.push_back({{"type", "Split"},
                       {"pattern", {{"Regex", rule.pattern}}},
                       {"behavior", behavior_name(rule.behavior)},
                       {"invert", rule.invert}});
    }
    steps.push_back(byte_level);
    root["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", std::move(steps)}};
  }
  root["post_processor"] = nullptr;
  root["decoder"] = {{"type", "ByteLevel"},
                     {"add_prefix_space", true},
                     {"trim_offsets", true},
                     {"use_regex", true}};

  ordered_json model;
  model["type"] = "BPE";
  model["dropout"] = nullptr;
  model["unk_token"] =
      vocab.unk_id ? ordered_json(vocab.tokens.at(*vocab.unk_id)) : ordered_json(nullptr);
  model["continuing_subword_prefix"] = nullptr;
  model["end_of_word_suffix"] = nullptr;
  model["fuse_unk"] = false;
  model["byte_fallback"] = false;
  model["ignore_merges"] = vocab.ignore_merges;
  ordered_json model_vocab = ordered_json::object();
  for (size_t id = 0; id < vocab.tokens.size(); ++id) {
    if (is_added_type(vocab.types[id])) continue;
    model_vocab[checked_utf8(vocab.tokens[id], fmt::format("token {}", id))] = id;
  }
  model["vocab"] = std::move(model_vocab);
  bool pairs = false;
  for (const auto& [left, right] : vocab.merges)
    pairs = pairs || left.find(' ') != std::string::npos || right.find(' ') != std::string::npos;
  ordered_json merges = ordered_json::array();
  for (const auto& [left, right] : vocab.merges) {
    if (pairs) {
      merges.push_back({left, right});
    } else {
      merges.push_back(left + " " + right);
    }
  }
  model["merges"] = std::move(merges);
  root["model"] = std::move(model);
  return dump(root);
}

std::string to_tokenizer_config_json(const Vocabulary& vocab) {
  const auto text_of = [&](const std::optional<TokenId>& id) -> ordered_json {
    if (!id) return nullptr;
    const std::string& spelled = vocab.tokens.at(*id);
    return checked_utf8(is_added_type(vocab.types.at(*id)) ? spelled : from_byte_level(spelled),
                        fmt::format("token {}", *id));
  };
  ordered_json config;
  config["tokenizer_class"] = "PreTrainedTokenizerFast";
  config["add_bos_token"] = vocab.add_bos;
  config["add_eos_token"] = vocab.add_eos;
  config["bos_token"] = text_of(vocab.bos_id);
  config["eos_token"] = text_of(vocab.eos_id);
  config["pad_token"] = text_of(vocab.pad_id);
  config["unk_token"] = text_of(vocab.unk_id);
  config["clean_up_tokenization_spaces"] = false;
  if (!vocab.chat_template.empty())
    config["chat_template"] = checked_utf8(vocab.chat_template, "chat_template");
  return dump(config);
}

void write_hf_tokenizer(const Vocabulary& vocab, const std::filesystem::path& folder) {
  const std::string tokenizer = to_tokenizer_json(vocab);
  const std::string config = to_tokenizer_config_json(vocab);
  std::error_code ec;
  std::filesystem::create_directories(folder, ec);
  if (ec)
    fail(folder.string(), "create", "expected a folder that can be created: {}", ec.message());
  write_text_file(folder / "tokenizer.json", tokenizer);
  write_text_file(folder / "tokenizer_config.json", config);
}

}  // namespace steermoe::tokenizer
