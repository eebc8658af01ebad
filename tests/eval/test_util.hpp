#pragma once

#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>

namespace steermoe::eval::testing {

inline const std::filesystem::path kData =
    std::filesystem::path(STEERMOE_SOURCE_DIR) / "tests" / "data" / "eval";

inline const nlohmann::json& expected() {
  static const nlohmann::json j = [] {
    std::ifstream in(kData / "expected.json");
    return nlohmann::json::parse(in);
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

struct CliResult {
  int status = -1;
  std::string output;
};

inline CliResult run_cli(const std::string& args) {
  const std::string cmd = std::string(STEERMOE_BINARY) + " " + args + " 2>&1";
  CliResult r;
  std::FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  std::array<char, 4096> buf{};
  size_t n = 0;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.output.append(buf.data(), n);
  const int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

}  // namespace steermoe::eval::testing
