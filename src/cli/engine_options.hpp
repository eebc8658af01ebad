// The engine options shared by every command that runs the model (run, logits, perplexity,
// trace, bench, kl): routing policy, cache size, link, calibration. One place so that every
// command spells, checks and defaults them the same way.
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>

#include "engine/engine.hpp"
#include "model/weights.hpp"
#include "policy/calibration.hpp"

namespace steermoe::cli {

struct EngineOptions {
  std::string policy = "exact:evict=lru";
  int cache = 0;           // slots per MoE layer; 0 = from --residency, else all experts
  double residency = 0.0;  // fraction of experts cached per layer (0 = not given)
  std::string link = "resident";
  int max_inflight = 2;
  std::string calib;  // empty = the model's own calib.smcal when present
  bool verify = false;
  std::string backend = "auto";  // cpu | cuda | auto (cuda when built with it and a GPU is present)
};

// Adds --policy (unless `with_policy` is false: commands that take several), --cache,
// --residency, --link, --max-inflight, --calib, --verify and --backend to `cmd`.
void add_engine_options(CLI::App* cmd, EngineOptions& options, bool with_policy = true);

// The cache size the options ask for on this model (C): --cache, or round(--residency * E)
// clamped to [K, E], or E.
int resolve_cache(const EngineOptions& options, const model::ModelConfig& config);

// The calibration file to use: --calib, else the model's default (MODEL_DIR/calib.smcal for an
// HF folder, FILE.smcal beside a .gguf) when it exists; empty when none.
std::string calibration_path(const EngineOptions& options, const std::string& model_path);

// Loads the calibration (if any path) and checks its shape against the model, naming the file.
std::optional<policy::Calibration> load_calibration(const std::string& path,
                                                    const model::ModelConfig& config);

// Throws a clear error when `policy` at cache size `cache` needs a calibration (warm set, score
// range, token prior) and none was found.
void require_calibration(const std::string& policy, int cache, const model::ModelConfig& config,
                         bool have_calibration, const std::string& model_path);

// The compute backend --backend names: "cpu" or "cuda". auto gives cuda when this binary was
// built with CUDA and a device is present, cpu otherwise; cuda when unavailable is an error
// that says why.
std::string resolve_backend(const std::string& backend);

// EngineParams for one configuration (policy string given separately for multi-policy
// commands). `calibration` must outlive the engine.
engine::EngineParams engine_params(const EngineOptions& options, const std::string& policy,
                                   int cache, const policy::Calibration* calibration, int threads,
                                   int context);

}  // namespace steermoe::cli
