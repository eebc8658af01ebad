// bench --json reports (compare --latency): any JSON document gives ratios or raises
// steermoe::Error naming the field.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string_view>

#include "common/error.hpp"
#include "common/json_input.hpp"
#include "eval/compare.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const nlohmann::json j = steermoe::parse_json_or_discarded(
      std::string_view(reinterpret_cast<const char*>(data), size));
  if (j.is_discarded()) return 0;
  try {
    (void)steermoe::eval::latency_json(steermoe::eval::compare_latency(j, "fuzz", ""));
  } catch (const steermoe::Error&) {
  }
  return 0;
}
