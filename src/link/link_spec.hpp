// The `--link` value: which way experts reach their cache slots. Parsed once here, with its
// parameters, so that a bad value is reported before any model is loaded and every command
// reads it the same way.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace steermoe::link {

enum class LinkKind : uint8_t {
  kResident,  // every expert in place in the mapped model file; the cache is logical only
  kSim,       // experts in place, copies timed on the simulated clock of a hardware profile
  kEmulated,  // experts copied from the host mapping at a set bandwidth (PCIe emulated)
  kDisk,      // experts read from the model file(s) into RAM slots
  kCuda,      // experts in pinned host memory, copied to device slots on a CUDA stream
};

struct EmulatedLinkParams {
  double bandwidth_bytes_per_s = 0;  // > 0
  double latency_s = 0;              // >= 0
  // The last `spin_s` before a copy's end are spun (yielding) rather than slept, for accuracy
  // at small copy times; 0 sleeps only.
  double spin_s = 50e-6;
  // Test hook: each copy takes an extra uniform random delay in [0, extra_delay_max_s), drawn
  // from `delay_seed` (to show that results do not depend on copy timing).
  double extra_delay_max_s = 0;
  uint64_t delay_seed = 1;
};

// Parses "emulated:GBPS[,LATENCY_US]" (GB = 1e9 bytes; e.g. "emulated:25,10"). Throws
// steermoe::Error naming the field ("--link", "bandwidth" / "latency" / "form").
EmulatedLinkParams parse_emulated_spec(std::string_view spec);

struct LinkSpec {
  LinkKind kind = LinkKind::kResident;
  std::string text = "resident";  // as given: resident | disk | emulated:... | sim:PROFILE | cuda
  std::string profile;            // sim: the profile's name or .json path
  EmulatedLinkParams emulated;    // emulated: bandwidth and latency

  // False for resident (no expert moves, no scheduler); true for every other kind.
  bool moves_experts() const { return kind != LinkKind::kResident; }
};

// Parses a --link value: resident | disk | emulated:GBPS[,LATENCY_US] | sim:PROFILE | cuda.
// Throws steermoe::Error ("--link", "value" / "sim" / "bandwidth" / "latency") naming what was
// expected.
LinkSpec parse_link_spec(std::string_view text);

}  // namespace steermoe::link
