#include "cli/commands.hpp"

#include "cli/validators.hpp"

namespace steermoe::cli {

void add_all_commands(CLI::App& root) {
  // One line per command file (keep alphabetical).
  add_bench_command(root);
  add_profile_command(root);
  add_calibrate_command(root);
  add_compare_command(root);
  add_convert_command(root);
  add_detokenize_command(root);
  add_kl_command(root);
  add_logits_command(root);
  add_make_model_command(root);
  add_perplexity_command(root);
  add_quantize_command(root);
  add_replay_command(root);
  add_run_command(root);
  add_score_command(root);
  add_serve_command(root);
  add_sim_command(root);
  add_sweep_command(root);
  add_tokenize_command(root);
  add_trace_command(root);
  add_trace_synth_command(root);
  // Shared checks on every option (finite floats, unsigned integers, --quiet): validators.hpp.
  harden_options(root);
  (void)root;
}

}  // namespace steermoe::cli
