// Sweep grids come from users: any byte string expands or raises steermoe::Error, and every
// expanded point is a policy string that parses.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "common/error.hpp"
#include "eval/grid.hpp"
#include "policy/config.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    for (const std::string& p : steermoe::eval::expand_grid(text)) {
      try {
        steermoe::policy::parse_policy(p);
      } catch (const steermoe::Error&) {
        std::abort();  // expand_grid returned a point the policy parser rejects
      }
    }
  } catch (const steermoe::Error&) {
  }
  return 0;
}
