#include "cli/commands.hpp"

namespace steermoe::cli {

void add_all_commands(CLI::App& root) {
  // One line per command file (keep alphabetical).
  (void)root;
}

}  // namespace steermoe::cli
