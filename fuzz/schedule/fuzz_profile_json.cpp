// Hardware profile parser (`sim --profile`, `--link sim:PROFILE`, `bench --predict`): any input
// either parses into a profile whose every duration, bandwidth and count is finite and in range,
// and which survives its own JSON form, or throws steermoe::Error; nothing else may happen.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/error.hpp"
#include "schedule/profile.hpp"

namespace {

bool finite_nonnegative(double x) {
  return std::isfinite(x) && x >= 0;
}

bool in_range(const steermoe::schedule::HardwareProfile& p) {
  for (const double d : {p.attention_s, p.moe_fixed_s, p.moe_per_expert_s, p.dense_s, p.head_s,
                         p.host_policy_s, p.link_latency_s}) {
    if (!finite_nonnegative(d)) return false;
  }
  return std::isfinite(p.link_bandwidth_bytes_per_s) && p.link_bandwidth_bytes_per_s > 0 &&
         p.link_channels >= 1 && p.link_compute_slowdown >= 0 && p.link_compute_slowdown < 1 &&
         p.link_transfer_slowdown >= 0 && p.link_transfer_slowdown < 1 && p.expert_bytes >= 1 &&
         p.layers >= 0 && p.experts >= 0 && p.top_k >= 0 &&
         std::isfinite(p.resident_token_seconds(p.layers, p.top_k));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using steermoe::schedule::HardwareProfile;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  HardwareProfile p;
  try {
    p = steermoe::schedule::parse_profile_text(text, "fuzz.json");
  } catch (const steermoe::Error&) {
    return 0;
  }
  if (!in_range(p)) __builtin_trap();  // parse_profile must have refused this
  // What the profile writes, it reads back (sim and profile exchange these files).
  HardwareProfile again;
  try {
    again = steermoe::schedule::parse_profile(p.to_json(), "round trip");
  } catch (const steermoe::Error&) {
    __builtin_trap();
  }
  if (again.expert_bytes != p.expert_bytes || again.layers != p.layers ||
      again.link_channels != p.link_channels || again.name != p.name || !in_range(again)) {
    __builtin_trap();
  }
  return 0;
}
