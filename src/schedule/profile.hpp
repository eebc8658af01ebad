// Hardware profiles: the durations the simulated clock charges (policy contract "Timing model").
// A profile is a small JSON file in data/profiles/ (format and sources in its README.md).
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "link/simulated_link.hpp"

namespace steermoe::schedule {

struct HardwareProfile {
  std::string name;
  std::string description;
  // The model shape the figures were taken for (0 = any); sim warns when a trace differs.
  std::string model;
  int layers = 0;
  int experts = 0;
  int top_k = 0;
  // Link: one FIFO copy queue.
  double link_bandwidth_bytes_per_s = 0;  // > 0
  double link_latency_s = 0;              // per copy
  bool link_pipelined = false;            // copies overlap their latency (SimulatedLinkParams)
  // Copies transferring at once, each at bandwidth / channels (SimulatedLinkParams): a disk
  // that reads faster with several reads in flight. 1: one copy stream.
  int link_channels = 1;
  // Fraction of compute speed lost while a copy transfers (SimulatedLinkParams): measured by
  // `steermoe profile` on a CPU whose cores also serve the disk; 0 for a GPU's copy engine.
  double link_compute_slowdown = 0;
  // Fraction of the link's transfer speed lost while compute runs (SimulatedLinkParams): measured
  // by `steermoe profile` as the link's reads beside compute against the same reads alone.
  double link_transfer_slowdown = 0;
  int64_t expert_bytes = 0;  // bytes of one routed expert (> 0)
  // Compute per MoE layer: A(l) = attention + router + pre-gate; M(l) = moe_fixed (shared
  // experts, combine, residual) + |S| * moe_per_expert.
  double attention_s = 0;
  double moe_fixed_s = 0;
  double moe_per_expert_s = 0;
  // Per token: dense layers (compute only) and the head (final norm, lm_head, sampling).
  double dense_s = 0;
  double head_s = 0;
  // Host policy time per MoE layer, H(l) (part 2 of l + part 1 of l+1).
  double host_policy_s = 0;

  // ms/token with every expert resident (no copies, no stalls): the compute floor.
  double resident_token_seconds(int layers_used, int top_k_used) const;
  // The same profile with every compute and host policy duration times `factor` (> 0): the
  // machine running slower or faster than when it was profiled (resident_token_seconds scales by
  // `factor`); the link is kept.
  HardwareProfile with_compute_scaled(double factor) const;
  nlohmann::json to_json() const;
  // The simulated link these figures describe (the one place a profile becomes a link).
  link::SimulatedLinkParams link_params() const;
};

// Parses a profile; `where` names the file in messages. Durations in the file are in
// microseconds, bandwidth in GB/s (1e9 bytes/s).
HardwareProfile parse_profile(const nlohmann::json& json, const std::string& where);
// The same from the file's text (JSON syntax, nesting and number range checked first).
HardwareProfile parse_profile_text(std::string_view text, const std::string& where);

// `name_or_path`: a path to a .json file, or the name of a file in `profile_dir` (the repo's
// data/profiles unless given). Throws steermoe::Error naming `option` (the flag it came from) and
// listing the known names when not found.
HardwareProfile load_profile(std::string_view name_or_path,
                             const std::filesystem::path& profile_dir = {},
                             std::string_view option = "--profile");

// The repo's data/profiles (found next to the source tree this binary was built from, or
// through the STEERMOE_PROFILES environment variable).
std::filesystem::path default_profile_dir();

}  // namespace steermoe::schedule
