// tokenizer_config.json over a small vocabulary (a, b, ab, the byte-level space and the special
// <s>, </s>: copied for every input, so kept small): any bytes either apply (every special token
// it names is a token of the vocabulary) or throw steermoe::Error; nothing else may happen.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "common/error.hpp"
#include "tokenizer/hf_json.hpp"

namespace {

const steermoe::tokenizer::Vocabulary& base_vocabulary() {
  static const steermoe::tokenizer::Vocabulary vocab = steermoe::tokenizer::parse_tokenizer_json(
      R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2, "\u0120": 3},
                    "merges": ["a b"]},
          "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
          "decoder": {"type": "ByteLevel"},
          "added_tokens": [{"id": 4, "content": "<s>", "special": true},
                           {"id": 5, "content": "</s>", "special": true}]})",
      "small.json");
  return vocab;
}

bool in_vocabulary(const std::optional<int32_t>& id, size_t size) {
  return !id || (*id >= 0 && static_cast<size_t>(*id) < size);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  steermoe::tokenizer::Vocabulary vocab = base_vocabulary();
  try {
    steermoe::tokenizer::apply_tokenizer_config(
        std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.json", vocab);
  } catch (const steermoe::Error&) {
    return 0;
  }
  const size_t n = vocab.tokens.size();
  if (n != base_vocabulary().tokens.size() || !in_vocabulary(vocab.bos_id, n) ||
      !in_vocabulary(vocab.eos_id, n) || !in_vocabulary(vocab.pad_id, n) ||
      !in_vocabulary(vocab.unk_id, n))
    __builtin_trap();
  return 0;
}
