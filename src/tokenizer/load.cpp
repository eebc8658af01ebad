// Tokenizer::load: picks the reader from the path (GGUF file, HF folder, tokenizer.json).
#include <system_error>

#include "common/error.hpp"
#include "model/gguf.hpp"
#include "tokenizer/gguf_vocab.hpp"
#include "tokenizer/hf_json.hpp"
#include "tokenizer/tokenizer.hpp"

namespace steermoe::tokenizer {

Tokenizer Tokenizer::load(const std::filesystem::path& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    const std::filesystem::path json = path / "tokenizer.json";
    if (!std::filesystem::is_regular_file(json, ec))
      fail(path.string(), "tokenizer.json", "expected the folder to contain tokenizer.json");
    return Tokenizer(read_tokenizer_json(json));
  }
  if (!std::filesystem::exists(path, ec))
    fail(path.string(), "path", "expected an existing .gguf file, tokenizer.json or HF folder");
  if (model::is_gguf_path(path)) {
    // A split model's vocabulary is in its first file, whichever file was named.
    const model::GgufFile file = model::GgufFile::open(model::gguf_split_first(path));
    return Tokenizer(vocabulary_from_gguf(file));
  }
  return Tokenizer(read_tokenizer_json(path));
}

}  // namespace steermoe::tokenizer
