#pragma once

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>

#include "../cli_runner.hpp"
#include "../json_test_util.hpp"

namespace steermoe::eval::testing {

inline const std::filesystem::path kData =
    std::filesystem::path(STEERMOE_SOURCE_DIR) / "tests" / "data" / "eval";

inline const nlohmann::json& expected() {
  static const nlohmann::json j = [] {
    std::ifstream in(kData / "expected.json");
    return steermoe::test_support::parse_json_stream(in);
  }();
  return j;
}

// null -> NaN, "inf"/"-inf" -> infinities.
inline double value(const nlohmann::json& j) {
  if (j.is_null()) return std::numeric_limits<double>::quiet_NaN();
  if (j.is_string()) return j.get<std::string>() == "inf" ? INFINITY : -INFINITY;
  return j.get<double>();
}

// |a - b| <= rel * max(|a|, |b|) (+ a tiny absolute floor); NaN equals NaN, inf equals inf.
inline ::testing::AssertionResult close(double a, double b, double rel) {
  if (std::isnan(a) && std::isnan(b)) return ::testing::AssertionSuccess();
  if (std::isinf(a) || std::isinf(b)) {
    if (a == b) return ::testing::AssertionSuccess();
  } else if (std::fabs(a - b) <= rel * std::max(std::fabs(a), std::fabs(b)) + 1e-300) {
    return ::testing::AssertionSuccess();
  }
  char buf[160];
  std::snprintf(buf, sizeof buf, "%.17g vs expected %.17g (rel tol %g)", a, b, rel);
  return ::testing::AssertionFailure() << buf;
}

using steermoe::test_support::CliResult;
using steermoe::test_support::run_cli;

}  // namespace steermoe::eval::testing
