// Fuzzes the trace meta.json reader (and with it the shared depth-limited JSON parse,
// common/json_input.hpp). Any input either parses into a TraceMeta or throws steermoe::Error;
// deep nesting must be an error, never a stack overflow. The seeds include nesting just under
// and just over the limit so that depth is within the fuzzer's reach.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "common/error.hpp"
#include "common/json_input.hpp"
#include "trace/trace.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const steermoe::trace::TraceMeta meta = steermoe::trace::parse_trace_meta(text, "meta.json");
    (void)steermoe::dump_json(meta.to_json());
  } catch (const steermoe::Error&) {
  }
  try {
    // The excerpt of any parsed value is bounded.
    const nlohmann::json value = steermoe::parse_json(text, "fuzz.json");
    SM_ASSERT(steermoe::json_excerpt(value).size() <= steermoe::kJsonExcerptChars + 64);
  } catch (const steermoe::Error&) {
  }
  return 0;
}
