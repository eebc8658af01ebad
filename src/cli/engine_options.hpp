// The engine options shared by every command that runs the model (run, logits, perplexity,
// trace, bench, kl): routing policy, cache size, link, calibration. One place so that every
// command spells, checks and defaults them the same way.
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>

#include "common/memory_budget.hpp"
#include "engine/engine.hpp"
#include "model/weights.hpp"
#include "schedule/offload_config.hpp"

namespace steermoe::cli {

struct EngineOptions {
  std::string policy = "exact:evict=lru";
  int cache = 0;           // slots per MoE layer; 0 = from --residency, else all experts
  double residency = 0.0;  // fraction of experts cached per layer (0 = not given)
  std::string link = "resident";
  int max_inflight = 2;
  std::string pacing = "fifo";
  std::string issue = "boundary";  // --prefetch-issue
  std::string moe_wait = "all";    // --moe-wait
  std::string calib;               // empty = the model's own calib.smcal when present
  bool verify = false;
  std::string backend = "auto";  // cpu | cuda | auto (cuda when built with it and a GPU is present)
  std::string mem_limit;         // --mem-limit BYTES: empty = no budget
  std::string gdn_prefill = "recurrent";  // recurrent | chunked (Gated DeltaNet batched prefill)
  int prefill_batch = engine::EngineParams{}.max_batch;  // --prefill-batch: prompt tokens per step
};

// Adds --policy (unless `with_policy` is false: commands that take several), --cache,
// --residency, --link, --max-inflight, --calib, --verify, --backend, --mem-limit, --gdn-prefill
// and --prefill-batch to `cmd`.
void add_engine_options(CLI::App* cmd, EngineOptions& options, bool with_policy = true);

// The calibration file the options name: --calib, else the model's default (MODEL_DIR/calib.smcal
// for an HF folder, FILE.smcal beside a .gguf) when it exists; empty when none.
std::string calibration_path(const EngineOptions& options, const std::string& model_path);

// The offload request the options make for a loaded model: their policy, cache or residency,
// link, max_inflight, verify, and the calibration (calibration_path, read; none for a dense model,
// with a note when one was named).
schedule::OffloadRequest offload_request(const EngineOptions& options, const model::Model& model,
                                         const std::string& model_path);

// `request` with `policy` resolved for the model (engine::resolve_offload); warns once about the
// timing-dependent physical: mode.
schedule::OffloadConfig resolve_policy(const schedule::OffloadRequest& request,
                                       const std::string& policy, const model::Model& model);

// The compute backend --backend names: "cpu" or "cuda". auto gives cuda when this binary was
// built with CUDA and a device is present, cpu otherwise; cuda when unavailable is an error
// that says why.
std::string resolve_backend(const std::string& backend);

// --mem-limit: moves this process into a memory cgroup of that size (page cache counted) before
// anything is loaded; nullopt without the option. Call first in a command.
std::optional<MemoryBudget> enter_memory_budget(const EngineOptions& options,
                                                const std::string& model);

// A warning on stderr when -c asks for more positions than the model was trained on
// (max_position_embeddings / context_length): decoding goes on, but past them the output may
// degrade, as llama.cpp warns.
// `option`: the flag that set it.
void warn_past_trained_context(const model::ModelConfig& config, int context,
                               const char* option = "-c");

// With a budget: throws a clear error when the engine for `offload` at `context` positions
// cannot fit (engine/memory_plan.hpp), naming the parts and the largest --cache that would.
void check_fits(const std::optional<MemoryBudget>& budget, const model::Model& model,
                const schedule::OffloadConfig& offload, int context,
                const char* kv_sized_by = "-c");

// "peak RSS 1.2 GiB, cgroup peak 2.4 GiB of 3.0 GiB" (stderr, at the end of a command).
std::string memory_report(const std::optional<MemoryBudget>& budget);

// EngineParams for one resolved configuration.
engine::EngineParams engine_params(const EngineOptions& options,
                                   const schedule::OffloadConfig& offload, int threads,
                                   int context);

}  // namespace steermoe::cli
