// `steermoe tokenize` / `steermoe detokenize`: text <-> token ids with the model's tokenizer
// (a .gguf file, an HF folder with tokenizer.json, or a tokenizer.json file).
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cli/checks.hpp"
#include "cli/commands.hpp"
#include "common/error.hpp"
#include "common/input_file.hpp"
#include "common/json_input.hpp"
#include "tokenizer/tokenizer.hpp"

namespace steermoe::cli {
namespace {

std::string read_file(const std::string& path) {
  // A directory, FIFO or device is refused (never tokenized to [] or waited on).
  return read_text_file(path);
}

// "1,2,3", "1 2 3" or "[1, 2, 3]"; "[]" is no ids. An empty text, or an empty item between two
// commas ("1,,2": a lost id?), is refused rather than read as fewer ids.
std::vector<tokenizer::TokenId> parse_ids(const std::string& text) {
  std::vector<tokenizer::TokenId> ids;
  size_t pos = 0;
  const auto is_separator = [](char c) {
    return c == ',' || c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '[' || c == ']';
  };
  bool comma = false;  // a comma since the last id
  while (pos < text.size()) {
    if (is_separator(text[pos])) {
      if (text[pos] == ',') {
        if (comma || ids.empty())
          fail("--ids", "token id", "expected an id before each comma, found \"{}\"", text);
        comma = true;
      }
      ++pos;
      continue;
    }
    comma = false;
    size_t end = pos;
    while (end < text.size() && !is_separator(text[end])) ++end;
    const std::string item = text.substr(pos, end - pos);
    long long value = 0;
    size_t used = 0;
    try {
      value = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != item.size() || value < 0 || value > INT32_MAX)
      fail("--ids", "token id", "expected non-negative integers separated by commas, found \"{}\"",
           item);
    ids.push_back(static_cast<tokenizer::TokenId>(value));
    pos = end;
  }
  if (ids.empty() && text.find('[') == std::string::npos)
    fail("--ids", "token id", "expected token ids (or [] for none), found \"{}\"", text);
  return ids;
}

}  // namespace

void add_tokenize_command(CLI::App& root) {
  struct Options {
    std::string model;
    std::string text;
    std::string file;
    bool no_parse_special = false;
    bool add_special = false;
  };
  auto options = std::make_shared<Options>();
  CLI::App* cmd = root.add_subcommand(
      "tokenize", "Print the token ids of a text as a JSON array (byte-level BPE tokenizer)");
  cmd->add_option(
         "-m,--model", options->model,
         "Tokenizer source: a .gguf file, a folder with tokenizer.json, or a tokenizer.json")
      ->required();
  CLI::Option* text = cmd->add_option("--text", options->text, "Text to tokenize");
  CLI::Option* file = cmd->add_option("--file", options->file, "File whose contents to tokenize");
  text->excludes(file);
  cmd->add_flag("--no-parse-special", options->no_parse_special,
                "Treat control tokens typed in the text (<|endoftext|>, ...) as plain text "
                "(llama.cpp parse_special=false); default: match them, as HF tokenizers does");
  cmd->add_flag("--add-special", options->add_special,
                "Add BOS/EOS where the tokenizer asks for it (add_bos_token / add_eos_token)");
  cmd->final_callback([options, text, file] {
    if (text->count() == 0 && file->count() == 0)
      fail("tokenize", "input", "expected --text or --file");
    const tokenizer::Tokenizer tok = tokenizer::Tokenizer::load(options->model);
    const std::string input = file->count() ? read_file(options->file) : options->text;
    const std::vector<tokenizer::TokenId> ids = tok.encode(
        input, {.parse_special = !options->no_parse_special, .add_special = options->add_special});
    std::printf("%s\n", dump_json(nlohmann::json(ids)).c_str());
  });
}

void add_detokenize_command(CLI::App& root) {
  struct Options {
    std::string model;
    std::string ids;
    std::string ids_file;
    bool skip_special = false;
    bool clean_spaces = false;
  };
  auto options = std::make_shared<Options>();
  CLI::App* cmd = root.add_subcommand(
      "detokenize", "Print the text of token ids (bytes exactly as the tokens spell them)");
  cmd->add_option(
         "-m,--model", options->model,
         "Tokenizer source: a .gguf file, a folder with tokenizer.json, or a tokenizer.json")
      ->required();
  CLI::Option* ids =
      cmd->add_option("--ids", options->ids, "Token ids, e.g. 1,2,3 or \"[1, 2, 3]\"");
  CLI::Option* ids_file = cmd->add_option("--ids-file", options->ids_file,
                                          "File holding the ids (e.g. the output of tokenize)");
  ids->excludes(ids_file);
  cmd->add_flag("--skip-special", options->skip_special, "Leave control tokens out of the text");
  cmd->add_flag("--clean-spaces", options->clean_spaces,
                "Apply llama.cpp's detokenizer clean-up (no space before ?!., and 's 'm 're 've)");
  cmd->final_callback([options, ids, ids_file] {
    if (ids->count() == 0 && ids_file->count() == 0)
      fail("detokenize", "input", "expected --ids or --ids-file");
    const tokenizer::Tokenizer tok = tokenizer::Tokenizer::load(options->model);
    const std::string list = ids_file->count() ? read_file(options->ids_file) : options->ids;
    const std::string out = tok.decode(parse_ids(list), {.skip_special = options->skip_special,
                                                         .clean_spaces = options->clean_spaces});
    std::fwrite(out.data(), 1, out.size(), stdout);
  });
}

}  // namespace steermoe::cli
