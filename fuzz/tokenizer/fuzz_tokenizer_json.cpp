// libFuzzer target: parse arbitrary bytes as tokenizer.json, build the tokenizer, encode and
// decode a fixed multilingual string. Bad input must end in steermoe::Error, never a crash,
// hang or sanitizer report. Invariant checked: a vocabulary that loads and can be written back
// as tokenizer.json loads again with the same tokens and merges.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "common/error.hpp"
#include "tokenizer/hf_json.hpp"
#include "tokenizer/tokenizer.hpp"

namespace {

constexpr std::string_view kText =
    "Hello world's <|endoftext|> 12345 \t\n\n  x\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87 "
    "\xf0\x9f\x98\x80 |||EMAIL_ADDRESS||| I'M";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace steermoe::tokenizer;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  (void)llama_clean_spaces(input);
  Vocabulary vocab;
  try {
    vocab = parse_tokenizer_json(input, "fuzz.json");
    const Tokenizer tok(vocab);
    for (bool parse_special : {false, true}) {
      const std::vector<TokenId> ids =
          tok.encode(kText, {.parse_special = parse_special, .add_special = true});
      (void)tok.decode(ids);
      (void)tok.decode(ids, {.skip_special = true, .clean_spaces = true});
    }
  } catch (const steermoe::Error&) {
    return 0;
  }
  std::string written;
  try {
    written = to_tokenizer_json(vocab);
  } catch (const steermoe::Error&) {
    return 0;  // not every accepted vocabulary is expressible in the canonical form
  }
  const Vocabulary again = parse_tokenizer_json(written, "rewritten.json");  // must not throw
  if (again.tokens != vocab.tokens || again.merges != vocab.merges) std::abort();
  return 0;
}
