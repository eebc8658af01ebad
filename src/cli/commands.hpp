// Every subcommand of the `steermoe` binary registers itself here. A command file defines one
// `add_<name>_command` that adds a CLI11 subcommand with all its options (each with a default
// shown by --help) and a final callback that does the work. Failures are thrown as
// steermoe::Error; main() prints them and exits with status 1.
#pragma once

#include <CLI/CLI.hpp>

namespace steermoe::cli {

void add_all_commands(CLI::App& root);

// One declaration per command file (keep alphabetical).
void add_bench_command(CLI::App& root);
void add_profile_command(CLI::App& root);
void add_calibrate_command(CLI::App& root);
void add_compare_command(CLI::App& root);
void add_convert_command(CLI::App& root);
void add_detokenize_command(CLI::App& root);
void add_kl_command(CLI::App& root);
void add_logits_command(CLI::App& root);
void add_make_model_command(CLI::App& root);
void add_perplexity_command(CLI::App& root);
void add_quantize_command(CLI::App& root);
void add_replay_command(CLI::App& root);
void add_run_command(CLI::App& root);
void add_score_command(CLI::App& root);
void add_serve_command(CLI::App& root);
void add_sim_command(CLI::App& root);
void add_sweep_command(CLI::App& root);
void add_tokenize_command(CLI::App& root);
void add_trace_command(CLI::App& root);
void add_trace_synth_command(CLI::App& root);

}  // namespace steermoe::cli
