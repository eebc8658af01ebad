// Calibration from a trace recorded under exact routing: runs policy::Calibrator over every step
// of every sequence (docs/policy-contract.md: "Calibration counts every step of the held-out
// trace").
#pragma once

#include <nlohmann/json.hpp>

#include "policy/calibration.hpp"
#include "trace/trace.hpp"

namespace steermoe::trace {

// vocab: size of the token-prior table; 0 = meta.json's "vocab", or the largest token + 1.
policy::Calibration calibrate_trace(const Trace& trace, int vocab = 0);

// JSON report of a calibration: sizes, steps, prior entries, score ranges, warm-set order heads;
// with cache_slots > 0 also the warm-set coverage per layer (the fraction of exact top-K picks of
// the calibration text that the first C warm experts cover; in-sample).
nlohmann::json calibration_report(const policy::Calibration& calibration, int cache_slots);

}  // namespace steermoe::trace
