#include "schedule/profile.hpp"

#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <vector>

#include "common/error.hpp"
#include "common/input_file.hpp"
#include "common/json_input.hpp"

#ifndef STEERMOE_PROFILE_DIR
#define STEERMOE_PROFILE_DIR ""
#endif

namespace steermoe::schedule {

namespace {

// Every duration, bandwidth and size a profile may hold stays below this, so that sums over
// thousands of layers and tokens stay finite on the simulated clock (a year in microseconds is
// 3.2e13; no link reaches 1e6 GB/s).
constexpr double kMaxProfileNumber = 1e15;

double number(const nlohmann::json& object, const char* key, const std::string& where,
              double min_value, bool required) {
  if (!object.contains(key)) {
    if (required) fail(where, key, "missing (expected a number >= {})", min_value);
    return 0.0;
  }
  const auto& value = object.at(key);
  if (!value.is_number()) fail(where, key, "expected a number, got {}", json_excerpt(value));
  const double x = value.get<double>();
  if (!(x >= min_value && x <= kMaxProfileNumber))
    fail(where, key, "expected a number in [{}, {:g}], got {}", min_value, kMaxProfileNumber, x);
  return x;
}

// A whole number in [min_value, max_value] (32 or 32.0; not 32.5): casting anything else to an
// integer type would truncate it or, past the type's range, be undefined.
int64_t whole_number(const nlohmann::json& object, const char* key, const std::string& where,
                     int64_t min_value, int64_t max_value, bool required) {
  if (!object.contains(key)) {
    if (required)
      fail(where, key, "missing (expected a whole number in [{}, {}])", min_value, max_value);
    return 0;
  }
  const auto& value = object.at(key);
  if (value.is_number_integer()) {
    // Unsigned values above int64's range compare as huge, not negative.
    const bool fits = value.is_number_unsigned()
                          ? value.get<uint64_t>() <= static_cast<uint64_t>(max_value) &&
                                static_cast<int64_t>(value.get<uint64_t>()) >= min_value
                          : value.get<int64_t>() >= min_value && value.get<int64_t>() <= max_value;
    if (!fits)
      fail(where, key, "expected a whole number in [{}, {}], got {}", min_value, max_value,
           json_excerpt(value));
    return value.get<int64_t>();
  }
  const double x = value.is_number() ? value.get<double>() : 0.5;
  if (!value.is_number() || !(x >= static_cast<double>(min_value)) ||
      !(x <= static_cast<double>(max_value)) || x != std::floor(x))
    fail(where, key, "expected a whole number in [{}, {}], got {}", min_value, max_value,
         json_excerpt(value));
  return static_cast<int64_t>(x);
}

const nlohmann::json& section(const nlohmann::json& json, const char* key,
                              const std::string& where) {
  if (!json.contains(key) || !json.at(key).is_object()) fail(where, key, "expected an object");
  return json.at(key);
}

}  // namespace

double HardwareProfile::resident_token_seconds(int layers_used, int top_k_used) const {
  return layers_used * (attention_s + host_policy_s + moe_fixed_s + top_k_used * moe_per_expert_s) +
         dense_s + head_s;
}

HardwareProfile HardwareProfile::with_compute_scaled(double factor) const {
  SM_ASSERT(factor > 0);
  HardwareProfile p = *this;
  for (double* d : {&p.attention_s, &p.moe_fixed_s, &p.moe_per_expert_s, &p.dense_s, &p.head_s,
                    &p.host_policy_s})
    *d *= factor;
  return p;
}

HardwareProfile parse_profile(const nlohmann::json& json, const std::string& where) {
  if (!json.is_object()) fail(where, "(root)", "expected a JSON object");
  HardwareProfile p;
  if (!json.contains("name") || !json.at("name").is_string())
    fail(where, "name", "expected a string");
  p.name = json.at("name").get<std::string>();
  if (json.contains("description") && json.at("description").is_string())
    p.description = json.at("description").get<std::string>();
  if (json.contains("model")) {
    const auto& m = section(json, "model", where);
    if (m.contains("name") && m.at("name").is_string()) p.model = m.at("name").get<std::string>();
    const std::string mw = where + ": model";
    // 0: any (the shape was not recorded). Bounds far above any model's, below int's range.
    constexpr int64_t kMaxCount = int64_t{1} << 20;
    p.layers = static_cast<int>(whole_number(m, "layers", mw, 0, kMaxCount, false));
    p.experts = static_cast<int>(whole_number(m, "experts", mw, 0, kMaxCount, false));
    p.top_k = static_cast<int>(whole_number(m, "top_k", mw, 0, kMaxCount, false));
  }
  const auto& link = section(json, "link", where);
  const std::string lw = where + ": link";
  p.link_bandwidth_bytes_per_s = number(link, "bandwidth_GBps", lw, 1e-9, true) * 1e9;
  p.link_latency_s = number(link, "latency_us", lw, 0, false) * 1e-6;
  if (link.contains("pipelined")) {
    if (!link.at("pipelined").is_boolean())
      fail(lw, "pipelined", "expected true or false, got {}", json_excerpt(link.at("pipelined")));
    p.link_pipelined = link.at("pipelined").get<bool>();
  }
  if (link.contains("channels")) {
    const auto& c = link.at("channels");
    if (!c.is_number_integer() || c.get<int64_t>() < 1 || c.get<int64_t>() > 1024)
      fail(lw, "channels", "expected an integer in [1, 1024], got {}", json_excerpt(c));
    p.link_channels = static_cast<int>(c.get<int64_t>());
  }
  p.link_compute_slowdown = number(link, "compute_slowdown", lw, 0, false);
  if (!(p.link_compute_slowdown < 1))
    fail(lw, "compute_slowdown", "expected a fraction in [0, 1), got {}", p.link_compute_slowdown);
  p.link_transfer_slowdown = number(link, "transfer_slowdown", lw, 0, false);
  if (!(p.link_transfer_slowdown < 1))
    fail(lw, "transfer_slowdown", "expected a fraction in [0, 1), got {}",
         p.link_transfer_slowdown);
  p.expert_bytes = whole_number(json, "expert_bytes", where, 1, int64_t{1} << 48, true);
  const auto& compute = section(json, "compute_us", where);
  const std::string cw = where + ": compute_us";
  p.attention_s = number(compute, "attention", cw, 0, true) * 1e-6;
  p.moe_fixed_s = number(compute, "moe_fixed", cw, 0, true) * 1e-6;
  p.moe_per_expert_s = number(compute, "moe_per_expert", cw, 0, true) * 1e-6;
  p.dense_s = number(compute, "dense_per_token", cw, 0, false) * 1e-6;
  p.head_s = number(compute, "head", cw, 0, true) * 1e-6;
  p.host_policy_s = number(json, "host_policy_us", where, 0, true) * 1e-6;
  return p;
}

nlohmann::json HardwareProfile::to_json() const {
  return {{"name", name},
          {"description", description},
          {"model", {{"name", model}, {"layers", layers}, {"experts", experts}, {"top_k", top_k}}},
          {"link",
           {{"bandwidth_GBps", link_bandwidth_bytes_per_s / 1e9},
            {"latency_us", link_latency_s * 1e6},
            {"pipelined", link_pipelined},
            {"channels", link_channels},
            {"compute_slowdown", link_compute_slowdown},
            {"transfer_slowdown", link_transfer_slowdown}}},
          {"expert_bytes", expert_bytes},
          {"compute_us",
           {{"attention", attention_s * 1e6},
            {"moe_fixed", moe_fixed_s * 1e6},
            {"moe_per_expert", moe_per_expert_s * 1e6},
            {"dense_per_token", dense_s * 1e6},
            {"head", head_s * 1e6}}},
          {"host_policy_us", host_policy_s * 1e6}};
}

link::SimulatedLinkParams HardwareProfile::link_params() const {
  return {.bandwidth_bytes_per_s = link_bandwidth_bytes_per_s,
          .latency_s = link_latency_s,
          .pipelined = link_pipelined,
          .channels = link_channels,
          .compute_slowdown = link_compute_slowdown,
          .transfer_slowdown = link_transfer_slowdown};
}

std::filesystem::path default_profile_dir() {
  if (const char* env = std::getenv("STEERMOE_PROFILES"); env != nullptr && *env != '\0')
    return env;
  return STEERMOE_PROFILE_DIR;
}

HardwareProfile load_profile(std::string_view name_or_path,
                             const std::filesystem::path& profile_dir, std::string_view option) {
  namespace fs = std::filesystem;
  const fs::path dir = profile_dir.empty() ? default_profile_dir() : profile_dir;
  fs::path path(name_or_path);
  if (!(path.has_extension() && fs::exists(path))) {
    path = dir / (std::string(name_or_path) + ".json");
    if (!fs::exists(path)) {
      std::vector<std::string> known;
      std::error_code ec;
      for (const auto& entry : fs::directory_iterator(dir, ec)) {
        if (entry.path().extension() == ".json") known.push_back(entry.path().stem().string());
      }
      std::sort(known.begin(), known.end());
      fail(std::string(option), std::string(name_or_path),
           "expected a profile file or one of the names in {}: {}", dir.string(),
           fmt::format("{}", fmt::join(known, ", ")));
    }
  }
  return parse_profile_text(read_input_file(path, "a hardware profile", kMaxJsonFileBytes),
                            path.string());
}

HardwareProfile parse_profile_text(std::string_view text, const std::string& where) {
  // parse_json checks the nesting before anything can recurse over it, and turns syntax errors
  // and numbers beyond double range into steermoe::Error naming the file.
  return parse_profile(parse_json(text, where), where);
}

}  // namespace steermoe::schedule
