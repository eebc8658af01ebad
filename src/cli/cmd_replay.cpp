// `steermoe replay`: runs routing policies over a recorded trace (RequestRouter, in the engine's
// order) and reports copies per token, replaced top-K picks and the loop kind.
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "cli/checks.hpp"
#include "cli/commands.hpp"
#include "cli/validators.hpp"
#include "common/error.hpp"
#include "common/json_input.hpp"
#include "common/output_file.hpp"
#include "trace/calibration_file.hpp"
#include "trace/replay.hpp"
#include "trace/trace.hpp"

namespace steermoe::cli {

void add_replay_command(CLI::App& root) {
  struct Options {
    std::string trace_dir;
    std::string calib;
    std::vector<std::string> policies;
    int cache = 0;
    std::string decisions;
    std::string json;
  };
  auto options = std::make_shared<Options>();
  CLI::App* cmd = root.add_subcommand(
      "replay",
      "Replay a router trace under one or more routing policies; prints one JSON summary per "
      "policy on stdout and a table on stderr");
  cmd->add_option("--trace", options->trace_dir,
                  "Trace folder (meta.json, tokens.npy, scores.npy, ...)")
      ->required();
  cmd->add_option("--calib", options->calib, "Calibration file (.smcal, from `steermoe calibrate`)")
      ->required();
  cmd->add_option("--policy", options->policies,
                  "Policy string, e.g. psr:lambda=0.3,n=1 (repeat the option for several policies)")
      ->required()
      ->take_all();
  cmd->add_option("--cache", options->cache, "Cache slots per layer C (K <= C <= E)")->required();
  cmd->add_option("--decisions", options->decisions,
                  "Write the decisions as JSON lines (one per step and layer; each policy's block "
                  "ends with its summary line)");
  cmd->add_option("--json", options->json,
                  "Also write the summaries (a JSON array) to this file ('-' = stdout, in place "
                  "of the summary lines)")
      ->check(WritablePath);
  cmd->final_callback([options] {
    const trace::Trace input = trace::Trace::open(options->trace_dir);
    const policy::Calibration calibration = trace::read_calibration(options->calib);
    std::ofstream decisions;
    if (!options->decisions.empty()) {
      decisions.open(options->decisions, std::ios::binary | std::ios::trunc);
      if (!decisions) fail(options->decisions, "open", "cannot create the decisions file");
    }
    std::vector<trace::ReplaySummary> summaries;
    nlohmann::json all = nlohmann::json::array();
    for (const std::string& policy : options->policies) {
      trace::ReplayOptions replay{.policy = policy,
                                  .cache_slots = options->cache,
                                  .calibration_source = options->calib,
                                  .decisions = options->decisions.empty() ? nullptr : &decisions};
      summaries.push_back(trace::replay_trace(input, calibration, replay));
      all.push_back(summaries.back().to_json());
      if (options->json != "-") std::printf("%s\n", dump_json(all.back()).c_str());
    }
    if (!options->decisions.empty()) {
      decisions.close();
      if (!decisions) fail(options->decisions, "write", "could not write the decisions file");
    }
    write_json_report(options->json, dump_json(all, 2) + "\n");
    std::fprintf(stderr, "%s", trace::summary_table(summaries).c_str());
    for (const trace::ReplaySummary& s : summaries)
      if (s.loop == "open") {
        std::fprintf(stderr,
                     "loop: open (%s): an approximation of running the policy in the model\n",
                     s.loop_reason.c_str());
        break;
      }
  });
}

}  // namespace steermoe::cli
