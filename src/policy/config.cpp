#include "policy/config.hpp"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "common/error.hpp"

namespace steermoe::policy {
namespace {

constexpr const char* kWhere = "policy string";

struct KeyValue {
  std::string key;
  std::string value;
};

std::vector<KeyValue> split_params(std::string_view text, std::string_view full) {
  std::vector<KeyValue> out;
  std::set<std::string> seen;
  size_t pos = 0;
  while (pos <= text.size() && !text.empty()) {
    size_t comma = text.find(',', pos);
    std::string_view item =
        text.substr(pos, comma == std::string_view::npos ? text.npos : comma - pos);
    size_t eq = item.find('=');
    if (item.empty() || eq == std::string_view::npos || eq == 0 || eq + 1 == item.size()) {
      fail(fmt::format("{} '{}'", kWhere, full), fmt::format("parameter '{}'", item),
           "expected key=value (parameters are separated by commas)");
    }
    KeyValue kv{std::string(item.substr(0, eq)), std::string(item.substr(eq + 1))};
    if (!seen.insert(kv.key).second) {
      fail(fmt::format("{} '{}'", kWhere, full), fmt::format("key '{}'", kv.key),
           "given twice; expected each key at most once");
    }
    out.push_back(std::move(kv));
    if (comma == std::string_view::npos) break;
    pos = comma + 1;
  }
  return out;
}

float parse_float(const KeyValue& kv, std::string_view full) {
  float v = 0.0f;
  const char* begin = kv.value.data();
  const char* end = begin + kv.value.size();
  auto [ptr, ec] = std::from_chars(begin, end, v);
  if (ec != std::errc() || ptr != end || !std::isfinite(v) || v < 0.0f) {
    fail(fmt::format("{} '{}'", kWhere, full), fmt::format("key '{}'", kv.key),
         "expected a finite number >= 0, got '{}'", kv.value);
  }
  return v;
}

int parse_int(const KeyValue& kv, std::string_view full, int lo, int hi) {
  int v = 0;
  const char* begin = kv.value.data();
  const char* end = begin + kv.value.size();
  auto [ptr, ec] = std::from_chars(begin, end, v);
  if (ec != std::errc() || ptr != end || v < lo || v > hi) {
    fail(fmt::format("{} '{}'", kWhere, full), fmt::format("key '{}'", kv.key),
         "expected an integer in [{}, {}], got '{}'", lo, hi, kv.value);
  }
  return v;
}

Evict parse_evict(const KeyValue& kv, std::string_view full) {
  if (kv.value == "a") return Evict::kA;
  if (kv.value == "lru") return Evict::kLru;
  fail(fmt::format("{} '{}'", kWhere, full), "key 'evict'", "expected 'a' or 'lru', got '{}'",
       kv.value);
}

RangeMode parse_range(const KeyValue& kv, std::string_view full) {
  if (kv.value == "fixed") return RangeMode::kFixed;
  if (kv.value == "running") return RangeMode::kRunning;
  fail(fmt::format("{} '{}'", kWhere, full), "key 'range'",
       "expected 'fixed' or 'running', got '{}'", kv.value);
}

PrefetchGate parse_gate(const KeyValue& kv, std::string_view full) {
  if (kv.value == "window") return PrefetchGate::kWindow;
  if (kv.value == "bonus") return PrefetchGate::kBonus;
  fail(fmt::format("{} '{}'", kWhere, full), "key 'gate'", "expected 'window' or 'bonus', got '{}'",
       kv.value);
}

const char* kind_name(PolicyKind kind) {
  switch (kind) {
    case PolicyKind::kExact:
      return "exact";
    case PolicyKind::kCachePrior:
      return "cacheprior";
    case PolicyKind::kPsr:
      return "psr";
    case PolicyKind::kSpec:
      return "spec";
  }
  return "?";
}

// Keys each policy accepts; lambda is required where listed in `required`.
struct Grammar {
  PolicyKind kind;
  std::vector<std::string> keys;
  bool lambda_required;
};

const Grammar& grammar_for(std::string_view name, std::string_view full) {
  static const std::vector<std::pair<std::string, Grammar>> table = {
      {"exact", {PolicyKind::kExact, {"evict", "n", "w"}, false}},
      {"cacheprior",
       {PolicyKind::kCachePrior, {"lambda", "evict", "j", "range", "n", "w", "gate"}, true}},
      {"psr", {PolicyKind::kPsr, {"lambda", "n", "w", "evict", "j", "range", "gate"}, true}},
      {"spec", {PolicyKind::kSpec, {"n", "w", "evict"}, false}},
  };
  for (const auto& [key, g] : table) {
    if (key == name) return g;
  }
  fail(fmt::format("{} '{}'", kWhere, full), "policy name",
       "expected one of exact, cacheprior, psr, spec, physical:cacheprior, physical:psr; got '{}'",
       name);
}

}  // namespace

PolicyConfig parse_policy(std::string_view text) {
  const std::string_view full = text;
  PolicyConfig config;
  if (text.starts_with("physical:")) {
    config.physical = true;
    text.remove_prefix(9);
  }
  const size_t colon = text.find(':');
  const std::string_view name = text.substr(0, colon);
  const std::string_view params =
      colon == std::string_view::npos ? std::string_view{} : text.substr(colon + 1);
  const Grammar& grammar = grammar_for(name, full);
  config.kind = grammar.kind;
  if (config.physical && config.kind != PolicyKind::kCachePrior &&
      config.kind != PolicyKind::kPsr) {
    fail(fmt::format("{} '{}'", kWhere, full), "physical mode",
         "expected physical:cacheprior:... or physical:psr:...");
  }
  // Defaults per policy (docs/policy-contract.md "Named policies").
  switch (config.kind) {
    case PolicyKind::kExact:
      config.evict = Evict::kLru;
      break;
    case PolicyKind::kCachePrior:
      config.evict = Evict::kLru;
      break;
    case PolicyKind::kPsr:
      config.evict = Evict::kA;
      config.prefetch_budget = 1;
      break;
    case PolicyKind::kSpec:
      config.evict = Evict::kA;
      config.prefetch_budget = 1;
      break;
  }
  bool has_lambda = false;
  for (const KeyValue& kv : split_params(params, full)) {
    bool allowed = false;
    for (const auto& k : grammar.keys) allowed = allowed || k == kv.key;
    if (!allowed) {
      std::string keys;
      for (const auto& k : grammar.keys) keys += (keys.empty() ? "" : ", ") + k;
      fail(fmt::format("{} '{}'", kWhere, full), fmt::format("key '{}'", kv.key),
           "unknown for policy '{}'; expected one of: {}", name, keys);
    }
    if (kv.key == "lambda") {
      config.lambda = parse_float(kv, full);
      has_lambda = true;
    } else if (kv.key == "n") {
      config.prefetch_budget = parse_int(kv, full, 0, 4096);
    } else if (kv.key == "w") {
      config.window = parse_int(kv, full, 1, 4096);
    } else if (kv.key == "evict") {
      config.evict = parse_evict(kv, full);
    } else if (kv.key == "j") {
      config.protect_top_j = parse_int(kv, full, 0, 4096);
    } else if (kv.key == "range") {
      config.range = parse_range(kv, full);
    } else if (kv.key == "gate") {
      config.gate = parse_gate(kv, full);
    }
  }
  // The predicted selection of gate=bonus reads the logical cache; physical mode's bonus set is
  // the issued copies, so the two together would make part 1 depend on timing as well.
  if (config.physical && config.gate == PrefetchGate::kBonus) {
    fail(fmt::format("{} '{}'", kWhere, full), "key 'gate'",
         "'bonus' is not available in physical mode; expected gate=window there");
  }
  if (grammar.lambda_required && !has_lambda) {
    fail(fmt::format("{} '{}'", kWhere, full), "key 'lambda'",
         "required for policy '{}' (e.g. {}:lambda=0.3)", name, name);
  }
  return config;
}

std::string PolicyConfig::to_string() const {
  std::string out = physical ? "physical:" : "";
  out += kind_name(kind);
  std::vector<std::string> parts;
  if (kind == PolicyKind::kCachePrior || kind == PolicyKind::kPsr) {
    parts.push_back(fmt::format("lambda={}", lambda));
  }
  if (prefetch_budget > 0 || kind == PolicyKind::kPsr || kind == PolicyKind::kSpec) {
    parts.push_back(fmt::format("n={}", prefetch_budget));
  }
  if (window > 0) parts.push_back(fmt::format("w={}", window));
  parts.push_back(fmt::format("evict={}", evict == Evict::kA ? "a" : "lru"));
  if (protect_top_j > 0) parts.push_back(fmt::format("j={}", protect_top_j));
  if (range == RangeMode::kRunning) parts.push_back("range=running");
  if (gate == PrefetchGate::kBonus) parts.push_back("gate=bonus");
  for (size_t i = 0; i < parts.size(); ++i) out += (i == 0 ? ":" : ",") + parts[i];
  return out;
}

void validate(const PolicyConfig& config, const RouterSpec& spec, int cache_slots) {
  // A model without MoE layers (a dense Qwen3) routes nothing: every policy and cache size is a
  // no-op there, so none is refused (the engine of a dense drafter takes the default options).
  if (spec.layers == 0) return;
  const std::string where =
      fmt::format("policy '{}' with cache {}", config.to_string(), cache_slots);
  if (spec.top_k <= 0 || spec.experts <= 0 || spec.top_k > spec.experts) {
    fail(where, "model router", "expected 0 < top_k <= experts, got top_k={} experts={}",
         spec.top_k, spec.experts);
  }
  if (cache_slots < spec.top_k || cache_slots > spec.experts) {
    fail(where, "cache size", "expected K <= C <= E, i.e. {} <= C <= {}, got {}", spec.top_k,
         spec.experts, cache_slots);
  }
  const int w = config.effective_window(spec);
  if (w < 1 || w > spec.experts) {
    fail(where, "key 'w'", "expected 1 <= w <= E = {}, got {}", spec.experts, w);
  }
  if (config.protect_top_j > spec.top_k) {
    fail(where, "key 'j'", "expected j <= K = {}, got {}", spec.top_k, config.protect_top_j);
  }
  if (spec.n_group != 1) {
    if (spec.n_group < 1 || spec.experts % spec.n_group != 0 || spec.topk_group < 1 ||
        spec.topk_group > spec.n_group) {
      fail(where, "model router groups",
           "expected n_group dividing E and 1 <= topk_group <= n_group, got {} / {}", spec.n_group,
           spec.topk_group);
    }
  }
}

}  // namespace steermoe::policy
