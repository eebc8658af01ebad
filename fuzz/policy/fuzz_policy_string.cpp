// Policy strings come from users: any byte string must parse or raise steermoe::Error, and a
// parsed policy's canonical form must parse back to the same canonical form.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "common/error.hpp"
#include "policy/config.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const steermoe::policy::PolicyConfig config = steermoe::policy::parse_policy(text);
    const std::string canonical = config.to_string();
    if (steermoe::policy::parse_policy(canonical).to_string() != canonical) std::abort();
    steermoe::policy::RouterSpec spec{.experts = 64, .top_k = 8, .layers = 2};
    try {
      steermoe::policy::validate(config, spec, 32);
    } catch (const steermoe::Error&) {
    }
  } catch (const steermoe::Error&) {
  }
  return 0;
}
