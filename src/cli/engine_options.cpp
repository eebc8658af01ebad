#include "cli/engine_options.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string_view>
#include <vector>

#include "cli/validators.hpp"
#include "common/error.hpp"
#include "common/memory_budget.hpp"
#include "common/memory_limit.hpp"
#include "engine/cuda_backend_factory.hpp"
#include "engine/engine.hpp"
#include "engine/memory_plan.hpp"
#include "model/gguf.hpp"
#include "trace/calibration_file.hpp"

namespace steermoe::cli {

namespace fs = std::filesystem;

void add_engine_options(CLI::App* cmd, EngineOptions& o, bool with_policy) {
  if (with_policy)
    cmd->add_option("--policy", o.policy,
                    "Routing policy string (docs/commands.md: Policy strings)")
        ->capture_default_str();
  cmd->add_option("--cache", o.cache,
                  "Expert-cache slots per MoE layer (0: from --residency, else every expert)")
      ->check(CLI::Range(0, 1 << 16))
      ->capture_default_str();
  cmd->add_option("--residency", o.residency,
                  "Fraction of each layer's experts cached, in (0, 1] (instead of --cache)")
      ->check(Fraction)
      ->default_str("");  // 0 in the field means "not given", not a fraction to show
  cmd->add_option(
         "--link", o.link,
         "Where experts live: resident | disk | emulated:GBPS[,LATENCY_US] | sim:PROFILE | cuda")
      ->capture_default_str();
  cmd->add_option("--max-inflight", o.max_inflight, "Prefetch copies in flight at a layer boundary")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  cmd->add_option(
         "--prefetch-pacing", o.pacing,
         "When pending prefetches are copied: fifo (in order, at layer boundaries) | defer "
         "(one found unused at its layer waits until no other prefetch does) | demand "
         "(such a one is copied only when a later selection needs it); latency only, "
         "routing and output never change")
      ->check(CLI::IsMember({"fifo", "defer", "demand"}))
      ->capture_default_str();
  cmd->add_option(
         "--prefetch-issue", o.issue,
         "Where pending prefetches may be enqueued: boundary (at layer boundaries only, the "
         "timing model as specified) | early (also just before each MoE: after a stall the "
         "moment the awaited copy completes, so the link stays busy at the same --max-inflight); "
         "latency only, routing and output never change")
      ->check(CLI::IsMember({"boundary", "early"}))
      ->capture_default_str();
  cmd->add_option("--moe-wait", o.moe_wait,
                  "When a layer's MoE starts: all (after every copy of its experts completed, the "
                  "timing model as specified) | ready (at once on the experts already in their "
                  "slots, the others as their copies complete, so a missing expert is read "
                  "while the others compute); latency only, routing and output never change")
      ->check(CLI::IsMember({"all", "ready"}))
      ->capture_default_str();
  cmd->add_option("--calib", o.calib,
                  "Calibration (.smcal); default: the model folder's calib.smcal, or MODEL.smcal "
                  "beside a .gguf, when present");
  cmd->add_flag("--verify", o.verify,
                "Disk link: check every copied expert against a checksum (one full read at start)");
  cmd->add_option("--backend", o.backend,
                  "Compute backend: cpu | cuda | auto (cuda when built with CUDA and a GPU is "
                  "present)")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}))
      ->capture_default_str();
  cmd->add_option("--gdn-prefill", o.gdn_prefill,
                  "Gated DeltaNet layers (hybrid models) in a batched prefill: recurrent (token "
                  "by token, exactly as decoding) | chunked (chunks of 32 tokens per prefill "
                  "batch: rounds differently, docs/determinism.md; CPU backend)")
      ->check(CLI::IsMember({"recurrent", "chunked"}))
      ->capture_default_str();
  cmd->add_option("--prefill-batch", o.prefill_batch,
                  "Prompt tokens per batched prefill step when every expert is resident (each "
                  "expert's weights are read once per step; scratch memory grows with it)")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  cmd->add_option(
         "--mem-limit", o.mem_limit,
         "Memory budget (e.g. 3G, 2.5GiB, 800MB): the process runs in a memory cgroup of "
         "that size, page cache counted (pages of the model cached before the run are not: said); "
         "the engine must fit (non-expert weights + "
         "slots + KV) or the command says what does and what --cache would")
      ->check([](const std::string& value) {
        // Given but empty would otherwise read as "no budget".
        return value.empty() ? std::string("expected a byte count such as 3G, found ''")
                             : std::string();
      });
}

namespace {

// The files a model path names, for the page-cache check: a folder's model.safetensors or the
// shards its model.safetensors.index.json lists (what the loader reads; other files there do
// not count); a file and, for gguf-split's PREFIX-0000i-of-0000N.gguf, its siblings (named by
// model/gguf.hpp, the split format's owner). Best
// effort: the loader reports a bad folder or index itself.
std::vector<fs::path> model_files(const std::string& model) {
  std::vector<fs::path> files;
  std::error_code ec;
  const fs::path path(model);
  if (fs::is_directory(path, ec)) {
    if (std::ifstream index(path / "model.safetensors.index.json"); index) {
      const nlohmann::json j = nlohmann::json::parse(index, nullptr, /*allow_exceptions=*/false);
      std::set<std::string> shards;
      if (j.is_object() && j.contains("weight_map") && j["weight_map"].is_object())
        for (const auto& [name, file] : j["weight_map"].items())
          if (file.is_string()) shards.insert(file.get<std::string>());
      for (const std::string& s : shards) files.push_back(path / s);
    } else if (fs::exists(path / "model.safetensors", ec)) {
      files.push_back(path / "model.safetensors");
    }
    return files;
  }
  return model::gguf_split_paths(path);
}

}  // namespace

std::optional<MemoryBudget> enter_memory_budget(const EngineOptions& o, const std::string& model) {
  if (o.mem_limit.empty()) return std::nullopt;
  const uint64_t limit = parse_byte_count(o.mem_limit, "--mem-limit");
  // Pages of the model read before the budget (an earlier command, another process) stay charged
  // to the cgroup that read them: this run can then hold that much more than the budget, unlike
  // on a machine with that little memory. Measured before loading reads anything.
  uint64_t cached = 0;
  for (const fs::path& f : model_files(model)) cached += cached_file_bytes(f.string());
  if (cached > std::max<uint64_t>(uint64_t{16} << 20, limit / 50))
    std::fprintf(stderr,
                 "steermoe: warning: %s of the model's files is already in the page cache, "
                 "charged to whatever read it first, not to --mem-limit: this run may hold that "
                 "much more than a machine with %s would (evict it first for a budget as on "
                 "such a machine: `dd of=FILE oflag=nocache conv=notrunc,fdatasync count=0` per "
                 "file, or as root `echo 1 > /proc/sys/vm/drop_caches`)\n",
                 bytes_text(cached).c_str(), bytes_text(limit).c_str());
  if (limit > allocation_cap_bytes())
    std::fprintf(stderr,
                 "steermoe: warning: --mem-limit %s is more than this machine's %s of memory: it "
                 "bounds nothing here\n",
                 bytes_text(limit).c_str(), bytes_text(allocation_cap_bytes()).c_str());
  return MemoryBudget::enter(limit);
}

void warn_past_trained_context(const model::ModelConfig& config, int context, const char* option) {
  if (config.max_positions > 0 && context > config.max_positions)
    std::fprintf(stderr,
                 "steermoe: warning: %s %d is beyond the %d positions the model was trained on "
                 "(its max_position_embeddings); output past them may degrade\n",
                 option, context, config.max_positions);
}

void check_fits(const std::optional<MemoryBudget>& budget, const model::Model& model,
                const schedule::OffloadConfig& offload, int context, const char* kv_sized_by) {
  if (!budget) return;
  const model::ModelConfig& cfg = model.config();
  const int positions = engine::resolve_context(cfg, context);
  engine::check_memory_budget(engine::plan_memory(model, offload, positions), offload,
                              budget->limit_bytes(), cfg.top_k, cfg.experts, kv_sized_by);
}

std::string memory_report(const std::optional<MemoryBudget>& budget) {
  std::string out = "peak RSS " + bytes_text(peak_rss_bytes());
  if (budget) {
    const std::optional<uint64_t> peak = budget->peak_bytes();
    out += ", cgroup peak " + (peak ? bytes_text(*peak) : std::string("unknown")) + " of " +
           bytes_text(budget->limit_bytes());
  }
  return out;
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

std::string calibration_path(const EngineOptions& o, const std::string& model_path) {
  if (!o.calib.empty()) return o.calib;
  const fs::path p(model_path);
  std::error_code ec;
  const fs::path candidate =
      fs::is_directory(p, ec) ? p / "calib.smcal" : fs::path(p).replace_extension(".smcal");
  return fs::is_regular_file(candidate, ec) ? candidate.string() : std::string();
}

schedule::OffloadRequest offload_request(const EngineOptions& o, const model::Model& model,
                                         const std::string& model_path) {
  schedule::OffloadRequest r{.policy = o.policy,
                             .cache = o.cache,
                             .residency = o.residency,
                             .link = o.link,
                             .max_inflight = o.max_inflight,
                             .pacing = o.pacing,
                             .issue = o.issue,
                             .moe_wait = o.moe_wait,
                             .verify = o.verify};
  const std::string path = calibration_path(o, model_path);
  if (path.empty()) return r;
  if (!model.config().has_moe()) {
    // Nothing is routed: a calibration is not needed, and none can fit (no MoE layer).
    std::fprintf(stderr, "steermoe: note: %s has no MoE layers; calibration %s is not used\n",
                 model.config().source.c_str(), path.c_str());
    return r;
  }
  r.calibration = std::make_shared<const policy::Calibration>(trace::read_calibration(path));
  r.calibration_source = path;
  return r;
}

schedule::OffloadConfig resolve_policy(const schedule::OffloadRequest& request,
                                       const std::string& policy, const model::Model& model) {
  schedule::OffloadRequest r = request;
  r.policy = policy;
  schedule::OffloadConfig c = engine::resolve_offload(model, r);
  static bool warned = false;
  if (!warned && c.policy.physical) {
    warned = true;
    std::fprintf(stderr,
                 "steermoe: warning: '%s' is the physical: demonstration mode: routing reads the "
                 "copies the scheduler issued, so the output depends on copy timing\n",
                 policy.c_str());
  }
  return c;
}

engine::EngineParams engine_params(const EngineOptions& o, const schedule::OffloadConfig& offload,
                                   int threads, int context) {
  return {.threads = threads,
          .context = context,
          .max_batch = o.prefill_batch,
          .offload = offload,
          .backend = resolve_backend(o.backend),
          .gdn_prefill = o.gdn_prefill == "chunked" ? engine::DeltaRulePrefill::kChunked
                                                    : engine::DeltaRulePrefill::kRecurrent};
}

}  // namespace steermoe::cli
