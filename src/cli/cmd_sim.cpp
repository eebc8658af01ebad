// `steermoe sim`: routing policy + transfer scheduler on the simulated clock over a router
// trace, with durations from a hardware profile (docs/simulator.md). Reports ms/token (mean,
// p50, p99), copies per token by kind and stall per layer, as a markdown table and JSON.
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/checks.hpp"
#include "cli/commands.hpp"
#include "cli/validators.hpp"
#include "common/error.hpp"
#include "common/json_input.hpp"
#include "common/output_file.hpp"
#include "common/progress.hpp"
#include "schedule/offload_config.hpp"
#include "schedule/profile.hpp"
#include "schedule/simulator.hpp"
#include "trace/calibration_file.hpp"
#include "trace/replay.hpp"
#include "trace/trace.hpp"

namespace steermoe::cli {

namespace {

struct SimOptionsCli {
  std::string trace_dir;
  std::string calib;
  std::string profile = "rtx4090-olmoe";
  std::vector<std::string> policies;
  int cache = 0;
  std::vector<int> max_inflight{2};
  std::string pacing = "fifo";
  std::vector<std::string> issue{"boundary"};
  std::string moe_wait = "all";
  int64_t steps = 0;
  double link_gbps = 0;
  double latency_us = -1;
  int link_channels = 0;
  std::string json;
  std::string latencies;
};

struct Row {
  std::string policy_arg;
  int max_inflight = 0;
  std::string pacing;
  std::string issue;
  std::string moe_wait;
  std::string loop, loop_reason;
  bool physical = false;
  schedule::SimResult result;
  double wall_s = 0;
};

nlohmann::json row_json(const Row& row, int layers) {
  const schedule::SimResult& r = row.result;
  const schedule::RunTotals& t = r.totals;
  const double n = std::max<double>(1.0, static_cast<double>(t.tokens));
  std::vector<double> stall_per_layer;
  for (int l = 0; l < layers; ++l) stall_per_layer.push_back(t.layer_stall[l] / n * 1e3);
  return {
      {"policy", r.policy},
      {"policy_arg", row.policy_arg},
      {"physical_demonstration_mode", row.physical},
      {"max_inflight", row.max_inflight},
      {"prefetch_pacing", row.pacing},
      {"prefetch_issue", row.issue},
      {"moe_wait", row.moe_wait},
      {"loop", row.loop},
      {"loop_reason", row.loop_reason},
      {"tokens", t.tokens},
      {"requests", t.requests},
      {"ms_per_token", {{"mean", r.mean_s * 1e3}, {"p50", r.p50_s * 1e3}, {"p99", r.p99_s * 1e3}}},
      {"compute_floor_ms", r.resident_token_s * 1e3},
      {"copies_per_token",
       {{"total", (t.demand + t.prefetch_enqueued) / n},
        {"demand", t.demand / n},
        {"prefetch", t.prefetch_enqueued / n},
        {"prefetch_forced", t.prefetch_forced / n}}},
      {"prefetch_per_token",
       {{"emitted", t.prefetch_emitted / n},
        {"in_time", t.prefetch_in_time / n},
        {"late", t.prefetch_late / n},
        {"unused", t.prefetch_unused / n},
        {"dropped_stale", t.prefetch_dropped / n},
        {"dropped_at_request_start", t.prefetch_dropped_reset / n},
        {"pending_at_end", r.pending_at_end / n},
        {"deferred", t.prefetch_deferred / n}}},
      {"stall_ms_per_token",
       {{"total", t.stall / n * 1e3},
        {"on_demand", t.stall_on_demand / n * 1e3},
        {"on_prefetch", t.stall_on_prefetch / n * 1e3},
        {"on_other", t.stall_on_other / n * 1e3}}},
      {"stall_ms_per_token_by_layer", stall_per_layer},
      {"host_ms_per_token", t.host / n * 1e3},
      {"MB_per_token", static_cast<double>(t.bytes) / n / 1e6},
      {"prompt_warmup", {{"copies", t.warm_copies}, {"seconds", t.warm_seconds}}},
      {"decision_hash", fmt::format("{:016x}", r.decision_hash)},
      {"sim_wall_seconds", row.wall_s},
      {"token_layers_per_second",
       row.wall_s > 0 ? static_cast<double>(r.token_layers) / row.wall_s : 0.0},
  };
}

std::string markdown(const std::vector<Row>& rows, int layers) {
  std::string out =
      "| policy | inflight | loop | ms/token | p50 | p99 | copies/tok | demand | prefetch | "
      "emitted | in time | late | unused | dropped | stall ms | host ms | decisions |\n"
      "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- "
      "| --- | --- |\n";
  for (const Row& row : rows) {
    const auto& r = row.result;
    const auto& t = r.totals;
    const double n = std::max<double>(1.0, static_cast<double>(t.tokens));
    out += fmt::format(
        "| {}{} | {} | {} | {:.2f} | {:.2f} | {:.2f} | {:.2f} | {:.2f} | {:.2f} | {:.2f} | {:.2f} "
        "| {:.2f} | {:.2f} | {:.2f} | {:.2f} | {:.3f} | {:08x} |\n",
        r.policy, row.physical ? " (timing-dependent)" : "",
        fmt::format("{}{}", row.max_inflight, row.issue == "early" ? ", early" : ""), row.loop,
        r.mean_s * 1e3, r.p50_s * 1e3, r.p99_s * 1e3, (t.demand + t.prefetch_enqueued) / n,
        t.demand / n, t.prefetch_enqueued / n, t.prefetch_emitted / n, t.prefetch_in_time / n,
        t.prefetch_late / n, t.prefetch_unused / n, t.prefetch_dropped / n, t.stall / n * 1e3,
        t.host / n * 1e3, r.decision_hash >> 32);
  }
  out +=
      "\nPrefetches: emitted = in time + late + unused (part 1's insertions, copied or not); "
      "dropped: of the emitted, never copied (their slot was reassigned first); prefetch copies "
      "= emitted - dropped - those dropped at a request's start or left pending at the end "
      "(--json).\n";
  out += "\nStall per layer (ms/token):\n\n| layer |";
  for (size_t i = 0; i < rows.size(); ++i) out += fmt::format(" {} |", i + 1);
  out += "\n| --- |";
  for (size_t i = 0; i < rows.size(); ++i) out += " --- |";
  out += "\n";
  for (int l = 0; l < layers; ++l) {
    out += fmt::format("| {} |", l);
    for (const Row& row : rows) {
      const double n = std::max<double>(1.0, static_cast<double>(row.result.totals.tokens));
      out += fmt::format(" {:.3f} |", row.result.totals.layer_stall[l] / n * 1e3);
    }
    out += "\n";
  }
  out += "\nColumns of the stall table are the rows above, in order.\n";
  return out;
}

void run_sim(const SimOptionsCli& o) {
  const trace::Trace input = trace::Trace::open(o.trace_dir);
  if (input.steps() == 0)
    fail(o.trace_dir, "steps", "expected a trace with at least one routed step, found none");
  const policy::Calibration calibration =
      load_calibration_for(o.calib, input.meta().layers, input.meta().experts, input.meta().top_k,
                           input.meta().vocab, "the trace " + o.trace_dir + "'s");
  schedule::HardwareProfile profile = schedule::load_profile(o.profile);
  if (o.link_gbps > 0) profile.link_bandwidth_bytes_per_s = o.link_gbps * 1e9;
  if (o.latency_us >= 0) profile.link_latency_s = o.latency_us * 1e-6;
  if (o.link_channels > 0) profile.link_channels = o.link_channels;
  const trace::TraceMeta& meta = input.meta();
  const policy::RouterSpec spec = meta.router_spec();
  note_profile_shape(profile, spec, "sim");
  if (meta.expert_bytes && static_cast<int64_t>(*meta.expert_bytes) != profile.expert_bytes) {
    std::fprintf(stderr,
                 "sim: note: trace says %llu bytes per expert, profile %lld; using the "
                 "profile's\n",
                 static_cast<unsigned long long>(*meta.expert_bytes),
                 static_cast<long long>(profile.expert_bytes));
  }

  const int64_t steps = o.steps > 0 ? std::min<int64_t>(o.steps, input.steps()) : input.steps();
  const size_t cells = static_cast<size_t>(meta.layers) * meta.experts;
  std::vector<int64_t> starts;
  for (const int64_t s : input.sequence_starts())
    if (s < steps) starts.push_back(s);
  schedule::TraceView view{.layers = meta.layers, .experts = meta.experts};
  if (steps > 0) {
    view.tokens = input.tokens().first(static_cast<size_t>(steps));
    view.scores = {input.scores(0, 0).data(), static_cast<size_t>(steps) * cells};
    view.pregate = {input.pregate(0, 0).data(), static_cast<size_t>(steps) * cells};
  }
  view.sequence_starts = starts;

  std::vector<Row> rows;
  Progress progress(
      "sim",
      static_cast<int64_t>(o.policies.size() * o.max_inflight.size() * o.issue.size()) * steps,
      "steps");
  const std::string calibration_id = trace::calibration_fingerprint(calibration);  // once
  for (const std::string& text : o.policies) {
    const policy::PolicyConfig config = policy::parse_policy(text);
    if (config.physical) {
      std::fprintf(stderr,
                   "sim: WARNING: %s is the physical demonstration mode: routing reads the "
                   "experts whose copies were issued, so its decisions (and a model's outputs) "
                   "depend on transfer timing. Never a default.\n",
                   text.c_str());
    }
    const trace::LoopClass loop = trace::classify_loop(meta, config, spec, o.cache, calibration_id);
    for (const std::string& issue : o.issue) {
      for (const int inflight : o.max_inflight) {
        Row row;
        row.policy_arg = text;
        row.max_inflight = inflight;
        row.pacing = o.pacing;
        row.issue = issue;
        row.moe_wait = o.moe_wait;
        row.physical = config.physical;
        row.loop = loop.loop;
        row.loop_reason = loop.reason;
        const auto begin = std::chrono::steady_clock::now();
        row.result = schedule::simulate(spec, config, calibration, profile, view,
                                        {.cache_slots = o.cache,
                                         .max_inflight = inflight,
                                         .pacing = schedule::parse_pacing(o.pacing),
                                         .issue = schedule::parse_issue(issue),
                                         .moe_wait = schedule::parse_moe_wait(o.moe_wait)});
        row.wall_s =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
        rows.push_back(std::move(row));
        progress.advance(steps);  // per row; throws Interrupted after Ctrl-C
      }
    }
  }
  progress.finish();

  nlohmann::json results = nlohmann::json::array();
  for (const Row& row : rows) results.push_back(row_json(row, meta.layers));
  const nlohmann::json report = {
      {"trace", o.trace_dir},
      {"calibration", o.calib},
      {"model", meta.model},
      {"steps", steps},
      {"layers", meta.layers},
      {"experts", meta.experts},
      {"top_k", meta.top_k},
      {"cache_slots", o.cache},
      {"residency", static_cast<double>(o.cache) / meta.experts},
      {"recorded_policy", meta.policy ? nlohmann::json(*meta.policy) : nlohmann::json(nullptr)},
      {"profile", profile.to_json()},
      {"results", results},
  };
  const std::string table = markdown(rows, meta.layers);
  const bool json_to_stdout = o.json == "-";
  if (json_to_stdout) {
    std::printf("%s\n", dump_json(report, 2).c_str());
    std::fprintf(stderr, "%s", table.c_str());
  } else {
    std::printf("%s", table.c_str());
    if (!o.json.empty()) {
      write_file_atomic(o.json, dump_json(report, 2) + "\n");
    }
  }
  FILE* notes = json_to_stdout ? stderr : stdout;
  std::fprintf(notes, "\nprofile %s, cache %d of %d experts (%.1f%%), %lld steps; ",
               profile.name.c_str(), o.cache, meta.experts, 100.0 * o.cache / meta.experts,
               static_cast<long long>(steps));
  std::fprintf(notes, "loop: %s (%s)\n", rows.empty() ? "-" : rows.front().loop.c_str(),
               rows.empty() ? "" : rows.front().loop_reason.c_str());
  for (const Row& row : rows) {
    if (row.loop != rows.front().loop)
      std::fprintf(notes, "loop of %s: %s (%s)\n", row.result.policy.c_str(), row.loop.c_str(),
                   row.loop_reason.c_str());
  }

  if (!o.latencies.empty()) {
    std::string out = "policy,max_inflight,step,ms,copies,prefetch_issue\n";
    for (const Row& row : rows) {
      for (size_t i = 0; i < row.result.token_latency.size(); ++i) {
        out +=
            fmt::format("\"{}\",{},{},{:.6f},{},{}\n", row.result.policy, row.max_inflight, i,
                        row.result.token_latency[i] * 1e3, row.result.token_copies[i], row.issue);
      }
    }
    write_file_atomic(o.latencies, out);
  }
}

}  // namespace

void add_sim_command(CLI::App& root) {
  auto o = std::make_shared<SimOptionsCli>();
  CLI::App* cmd = root.add_subcommand(
      "sim",
      "Simulate decode latency: routing policy + transfer scheduler on a simulated clock over a "
      "router trace, with durations from a hardware profile (markdown table on stdout, JSON "
      "with --json)");
  cmd->add_option("--trace", o->trace_dir, "Trace folder (meta.json, tokens.npy, scores.npy, ...)")
      ->required();
  cmd->add_option("--calib", o->calib, "Calibration file (.smcal, from `steermoe calibrate`)")
      ->required();
  cmd->add_option("--profile", o->profile,
                  "Hardware profile: a name in data/profiles (rtx4090-olmoe, rtx4090-moonlight, "
                  "rtx4090-qwen36, cpu-ram-olmoe, cpu-disk-olmoe) or a .json path");
  cmd->add_option("--policy", o->policies,
                  "Policy string, e.g. psr:lambda=0.3,n=1 (repeat for a side-by-side table)")
      ->required()
      ->take_all()
      ->default_str("");  // required: no default to show
  cmd->add_option("--cache", o->cache, "Cache slots per layer C (K <= C <= E)")->required();
  cmd->add_option("--prefetch-pacing", o->pacing,
                  "When pending prefetches are copied: fifo | defer | demand (see `run --help`)")
      ->check(CLI::IsMember({"fifo", "defer", "demand"}))
      ->capture_default_str();
  cmd->add_option("--prefetch-issue", o->issue,
                  "Where pending prefetches may be enqueued: boundary (layer boundaries only, the "
                  "timing model as specified) | early (also before each MoE, after a stall; see "
                  "`run --help`); several values: one row each")
      ->take_all()
      ->check(CLI::IsMember({"boundary", "early"}));
  cmd->add_option("--moe-wait", o->moe_wait,
                  "When a layer's MoE starts: all (after every copy of its experts, the timing "
                  "model as specified) | ready (at once on the experts in their slots, the others "
                  "as their copies complete; see `run --help`)")
      ->check(CLI::IsMember({"all", "ready"}))
      ->capture_default_str();
  cmd->add_option("--max-inflight", o->max_inflight,
                  "Enqueued unfinished prefetches allowed at a layer boundary (several values: one "
                  "row each)")
      ->take_all()
      ->check(Positive);
  cmd->add_option("--steps", o->steps, "Simulate only the first N steps (0 = all)")
      ->check(NonNegative);
  cmd->add_option("--link-GBps", o->link_gbps,
                  "Override the profile's link bandwidth (GB/s; 0 = keep)")
      ->check(NonNegative);
  cmd->add_option("--latency-us", o->latency_us,
                  "Override the profile's per-copy latency (us; negative = keep)");
  cmd->add_option("--link-channels", o->link_channels,
                  "Override the profile's link channels: copies transferring at once, each at "
                  "bandwidth / channels (0 = keep)")
      ->check(CLI::Range(0, 1024));
  cmd->add_option("--json", o->json,
                  "Write the JSON report to this file ('-' = stdout, table then on stderr)")
      ->check(WritablePath);
  cmd->add_option("--latencies", o->latencies,
                  "Write per-token latencies (CSV: policy "
                  "(quoted),max_inflight,step,ms,copies,prefetch_issue) "
                  "for CDFs")
      ->check(WritablePath);
  cmd->final_callback([o] { run_sim(*o); });
}

}  // namespace steermoe::cli
