// Helpers shared by the policy tests: small calibrations and decision comparison.
#pragma once

#include <vector>

#include "policy/router.hpp"

namespace steermoe::policy::testing_util {

// Warm order = index order on every layer, a fixed range per layer, no prior.
inline Calibration simple_calibration(const RouterSpec& spec, float range) {
  Calibration c = uninformed_calibration(spec);
  c.score_range.assign(spec.layers, range);
  return c;
}

inline std::vector<std::pair<int, int>> copies(const std::vector<Copy>& v) {
  std::vector<std::pair<int, int>> out;
  for (const Copy& c : v) out.emplace_back(c.expert, c.slot);
  return out;
}

// Slot map as "expert in slot s" for s = 0..C-1 (-1 = free).
inline std::vector<int> slot_map(const LayerCache& cache) {
  std::vector<int> out;
  for (int s = 0; s < cache.slots(); ++s) out.push_back(cache.expert_in_slot(s));
  return out;
}

}  // namespace steermoe::policy::testing_util
