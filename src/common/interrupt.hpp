// Ctrl-C for long commands: install_interrupt_handler() makes SIGINT (and SIGTERM) set a flag
// instead of killing the process; long loops call check_interrupt(), which throws Interrupted.
// main() turns Interrupted into exit status 130 (128 + SIGINT) after the stack has unwound, so
// staged outputs (output_file.hpp) are removed and no complete-looking partial file is left.
// A second Ctrl-C while the first is being handled kills the process at once (default action).
#pragma once

#include "common/error.hpp"

namespace steermoe {

class Interrupted : public Error {
 public:
  Interrupted() : Error("interrupted") {}
};

constexpr int kInterruptExitStatus = 130;

void install_interrupt_handler();
bool interrupt_requested();
// Throws Interrupted when SIGINT/SIGTERM arrived since the handler was installed.
void check_interrupt();
// Test hook: behave as if SIGINT had arrived (or clear the flag).
void set_interrupt_requested(bool value);

}  // namespace steermoe
