// The calibration file `.smcal`: warm-set order, expert counts, score ranges and the sparse token
// prior of a policy::Calibration, in a small little-endian binary layout documented in README.md
// ("Calibration file"). Only non-zero prior entries are stored, so big vocabularies stay small.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "policy/calibration.hpp"

namespace steermoe::trace {

inline constexpr char kCalibrationMagic[8] = {'S', 'M', 'C', 'A', 'L', 'I', 'B', '\0'};
inline constexpr uint32_t kCalibrationVersion = 1;

struct CalibrationLimits {
  // The in-memory prior has layers * vocab + 1 row offsets; refuse files that would need more
  // (the real models need ~10M).
  uint64_t max_prior_rows = uint64_t{1} << 26;
};

std::vector<uint8_t> encode_calibration(const policy::Calibration& calibration);
// Decodes and validates every field; throws steermoe::Error "<where>: <field>: expected ...".
policy::Calibration decode_calibration(std::span<const uint8_t> bytes, const std::string& where,
                                       const CalibrationLimits& limits = {});

void write_calibration(const std::filesystem::path& path, const policy::Calibration& calibration);
// "fnv1a64:<16 hex digits>" of the calibration's encoded bytes: the same for the same contents
// whatever the file is called (a trace records it, so replay and sim can tell whether they run
// the calibration it was recorded with).
std::string calibration_fingerprint(const policy::Calibration& calibration);
policy::Calibration read_calibration(const std::filesystem::path& path);

}  // namespace steermoe::trace
