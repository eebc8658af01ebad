// `steermoe calibrate`: warm-set order, score ranges and token prior from an exact-routing trace,
// written as a .smcal file (format: src/trace/README.md).
#include <cstdio>
#include <memory>
#include <string>

#include "cli/commands.hpp"
#include "cli/validators.hpp"
#include "common/error.hpp"
#include "common/json_input.hpp"
#include "trace/calibrate.hpp"
#include "trace/calibration_file.hpp"
#include "trace/trace.hpp"

namespace steermoe::cli {

void add_calibrate_command(CLI::App& root) {
  struct Options {
    std::string trace_dir;
    std::string output;
    int cache = 0;
    int vocab = 0;
  };
  auto options = std::make_shared<Options>();
  CLI::App* cmd = root.add_subcommand(
      "calibrate",
      "Compute calibration data (warm-set order, score ranges, token prior) from a trace recorded "
      "under exact routing on held-out text; prints a JSON summary");
  cmd->add_option("--trace", options->trace_dir,
                  "Trace folder (meta.json, tokens.npy, scores.npy, ...)")
      ->required();
  cmd->add_option("-o,--output", options->output, "Calibration file to write (.smcal)")
      ->check(WritablePath)
      ->required();
  cmd->add_option("--cache", options->cache,
                  "Cache slots C: only for reporting the warm set's coverage (0 = no report)")
      ->check(NonNegative);
  cmd->add_option("--vocab", options->vocab,
                  "Token-prior vocabulary size (0 = meta.json's vocab, else the largest token + 1)")
      ->check(NonNegative);
  cmd->final_callback([options] {
    const trace::Trace input = trace::Trace::open(options->trace_dir);
    // The report's C is checked before the work: it must be a cache the trace's layers can have.
    const int experts = input.meta().experts;
    if (options->cache > experts)
      fail("--cache", "value", "expected at most the trace's {} experts per layer, found {}",
           experts, options->cache);
    if (input.meta().policy)
      std::fprintf(
          stderr,
          "steermoe calibrate: warning: %s was recorded under policy \"%s\", not exact routing\n",
          options->trace_dir.c_str(), input.meta().policy->c_str());
    const policy::Calibration calibration = trace::calibrate_trace(input, options->vocab);
    trace::write_calibration(options->output, calibration);
    nlohmann::json report = trace::calibration_report(calibration, options->cache);
    report["trace"] = options->trace_dir;
    report["output"] = options->output;
    std::printf("%s\n", dump_json(report, 2).c_str());
  });
}

}  // namespace steermoe::cli
