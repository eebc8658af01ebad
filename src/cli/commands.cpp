#include "cli/commands.hpp"

namespace steermoe::cli {

void add_all_commands(CLI::App& root) {
  // One line per command file (keep alphabetical).
  add_calibrate_command(root);
  add_replay_command(root);
  add_trace_synth_command(root);
  (void)root;
}

}  // namespace steermoe::cli
