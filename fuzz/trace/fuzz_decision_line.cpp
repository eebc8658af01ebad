// One line of a decisions file (`--decisions`, read back by `replay`): any bytes either parse
// into a record or throw steermoe::Error naming the file; a record that parses is written back
// by decision_line and reads again as the same record.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/error.hpp"
#include "trace/replay.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using steermoe::trace::DecisionRecord;
  const std::string_view line(reinterpret_cast<const char*>(data), size);
  DecisionRecord r;
  try {
    r = steermoe::trace::parse_decision_line(line, "fuzz.jsonl");
  } catch (const steermoe::Error&) {
    return 0;
  }
  if (r.t < 0 || r.layer < 0) __builtin_trap();
  const std::string again = steermoe::trace::decision_line(r);
  try {
    if (!(steermoe::trace::parse_decision_line(again, "round trip") == r)) __builtin_trap();
  } catch (const steermoe::Error&) {
    __builtin_trap();  // what replay writes, it must read
  }
  return 0;
}
