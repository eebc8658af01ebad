// `--link emulated:GBPS[,LATENCY_US]` comes from users: any byte string must parse to a valid
// bandwidth and latency or raise steermoe::Error.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "common/error.hpp"
#include "link/emulated_link.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const steermoe::link::EmulatedLinkParams p = steermoe::link::parse_emulated_spec(text);
    if (!(p.bandwidth_bytes_per_s > 0) || !(p.latency_s >= 0)) std::abort();
  } catch (const steermoe::Error&) {
  }
  return 0;
}
