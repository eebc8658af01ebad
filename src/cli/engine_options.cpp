#include "cli/engine_options.hpp"

#include <cmath>
#include <cstdio>
#include <filesystem>

#include "common/error.hpp"
#include "engine/cuda_backend_factory.hpp"
#include "engine/offload.hpp"
#include "policy/config.hpp"
#include "trace/calibration_file.hpp"

namespace steermoe::cli {

namespace fs = std::filesystem;

void add_engine_options(CLI::App* cmd, EngineOptions& o, bool with_policy) {
  if (with_policy)
    cmd->add_option("--policy", o.policy, "Routing policy string (README: Policy strings)")
        ->capture_default_str();
  cmd->add_option("--cache", o.cache,
                  "Expert-cache slots per MoE layer (0: from --residency, else every expert)")
      ->check(CLI::Range(0, 1 << 16))
      ->capture_default_str();
  cmd->add_option("--residency", o.residency,
                  "Fraction of each layer's experts cached, in (0, 1] (instead of --cache)")
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--link", o.link,
                  "Where experts live: resident | disk | emulated:GBPS[,LATENCY_US] | sim:PROFILE | cuda")
      ->capture_default_str();
  cmd->add_option("--max-inflight", o.max_inflight, "Prefetch copies in flight at a layer boundary")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  cmd->add_option("--calib", o.calib,
                  "Calibration (.smcal); default: the model's calib.smcal when present");
  cmd->add_flag("--verify", o.verify,
                "Disk link: check every copied expert against a checksum (one full read at start)");
  cmd->add_option("--backend", o.backend,
                  "Compute backend: cpu | cuda | auto (cuda when built with CUDA and a GPU is "
                  "present)")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}))
      ->capture_default_str();
}

std::string resolve_backend(const std::string& backend) {
  if (backend == "cpu") return backend;
  std::string why;
  const bool available = engine::cuda_backend_available(&why);
  if (backend == "cuda") {
    if (!available) fail("--backend", "cuda", "expected a usable CUDA backend, found {}", why);
    return backend;
  }
  if (backend != "auto")
    fail("--backend", "value", "expected cpu, cuda or auto, found '{}'", backend);
  return available ? "cuda" : "cpu";
}

int resolve_cache(const EngineOptions& o, const model::ModelConfig& config) {
  if (o.cache > 0 && o.residency > 0)
    fail("--residency", "value", "expected either --cache or --residency, not both");
  if (!config.has_moe()) return 0;  // a dense model has no expert cache (--cache is a no-op)
  if (o.cache > 0) return o.cache;
  if (o.residency > 0) {
    const int c = static_cast<int>(std::lround(o.residency * config.experts));
    return std::clamp(c, config.top_k, config.experts);
  }
  return config.experts;
}

std::string calibration_path(const EngineOptions& o, const std::string& model_path) {
  if (!o.calib.empty()) return o.calib;
  const fs::path p(model_path);
  std::error_code ec;
  const fs::path candidate =
      fs::is_directory(p, ec) ? p / "calib.smcal" : fs::path(p).replace_extension(".smcal");
  return fs::is_regular_file(candidate, ec) ? candidate.string() : std::string();
}

std::optional<policy::Calibration> load_calibration(const std::string& path,
                                                    const model::ModelConfig& config) {
  if (path.empty()) return std::nullopt;
  if (!config.has_moe()) {
    // Nothing is routed: a calibration is not needed, and none can fit (no MoE layer).
    std::fprintf(stderr, "steermoe: note: %s has no MoE layers; calibration %s is not used\n",
                 config.source.c_str(), path.c_str());
    return std::nullopt;
  }
  policy::Calibration c = trace::read_calibration(path);
  if (c.layers != config.moe_layer_count() || c.experts != config.experts ||
      c.top_k != config.top_k) {
    fail(path, "layers/experts/top_k",
         "expected a calibration for the model's {} MoE layers x {} experts, top-{}, found {} x "
         "{}, top-{}",
         config.moe_layer_count(), config.experts, config.top_k, c.layers, c.experts, c.top_k);
  }
  return c;
}

void require_calibration(const std::string& policy, int cache, const model::ModelConfig& config,
                         bool have_calibration, const std::string& model_path) {
  if (have_calibration || cache >= config.experts || !config.has_moe()) return;
  const policy::PolicyConfig p = policy::parse_policy(policy);
  // Exact routing with the LRU clock needs nothing calibrated; everything else uses the warm
  // set, the score range or the token prior.
  if (p.kind == policy::PolicyKind::kExact && p.evict == policy::Evict::kLru) return;
  fail("--calib", "calibration",
       "policy '{}' at {} of {} experts needs a calibration (warm set, score range, token prior): "
       "give --calib FILE.smcal (make one with `steermoe trace` + `steermoe calibrate`); none "
       "found beside {}",
       policy, cache, config.experts, model_path);
}

engine::EngineParams engine_params(const EngineOptions& o, const std::string& policy, int cache,
                                   const policy::Calibration* calibration, int threads,
                                   int context) {
  (void)engine::link_kind(o.link);  // a bad --link is reported before any work
  static bool warned = false;
  if (!warned && policy::parse_policy(policy).physical) {
    warned = true;
    std::fprintf(stderr,
                 "steermoe: warning: '%s' is the physical: demonstration mode: routing reads the "
                 "copies the scheduler issued, so the output depends on copy timing\n",
                 policy.c_str());
  }
  return {.threads = threads,
          .context = context,
          .policy = policy,
          .cache_slots = cache,
          .calibration = calibration,
          .link = o.link,
          .max_inflight = o.max_inflight,
          .verify = o.verify,
          .backend = resolve_backend(o.backend)};
}

}  // namespace steermoe::cli
