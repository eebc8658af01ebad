// steermoe: one binary, one subcommand per job (`steermoe --help` lists them).
//
// Exit status: 0 on success (and for --help / --version), 1 for every user error (a bad file,
// a bad flag, a CLI parse or range error), 130 when interrupted (Ctrl-C; no partial output
// file is left under its final name).
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <new>
#include <string>
#include <string_view>

#include "cli/commands.hpp"
#include "common/error.hpp"
#include "common/interrupt.hpp"
#include "common/output_file.hpp"
#include "kernels/kernels.hpp"

namespace {

// CLI11 reports a missing required option (or subcommand) before an unknown one, so `steermoe
// foo` said "A subcommand is required" and `steermoe run --modle m` "--model is required". On
// such an error, name what was not understood instead: an unknown subcommand, or the first
// long option the command does not have (only "--name" forms: a short "-x" may be a value).
std::string not_understood(CLI::App& app, int argc, char** argv) {
  if (argc < 2) return {};
  const std::string_view first = argv[1];
  CLI::App* command = &app;
  int from = 1;
  if (!first.starts_with("-")) {
    const std::vector<CLI::App*> named =
        app.get_subcommands([&](CLI::App* sub) { return sub->check_name(std::string(first)); });
    command = named.empty() ? nullptr : named.front();
    if (command == nullptr)
      return "unknown command '" + std::string(first) + "' (steermoe --help lists them)";
    from = 2;
  }
  for (int i = from; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--") break;
    if (!arg.starts_with("--") || arg.size() == 2) continue;
    const std::string name(arg.substr(0, arg.find('=')));
    if (command->get_option_no_throw(name) == nullptr)
      return "unknown option '" + name + "'" +
             (command == &app ? std::string(" (steermoe --help lists the options)")
                              : " for `steermoe " + command->get_name() + "` (steermoe " +
                                    command->get_name() + " --help lists them)");
  }
  return {};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "steermoe: inference and expert-cache routing policies for offloaded Mixture-of-Experts "
      "models (prefetch-steered routing)"};
  app.option_defaults()->always_capture_default();
  app.require_subcommand(1);
  app.set_version_flag("--version", "steermoe 0.1.0");
  steermoe::cli::add_all_commands(app);
  steermoe::install_interrupt_handler();
  try {
    // STEERMOE_KERNELS picks the kernel level (default: the best the CPU has); avx512bf16 rounds
    // activations to bf16 for BF16 weights, avx512 keeps them f32 (what an f32 reference such as
    // HF transformers in float32 computes).
    steermoe::kernels::select_isa_from_env();
    app.parse(argc, argv);
    // Text on stdout (tokenize, perplexity, replay, ...) is output too: a write that failed
    // (a full disk, a closed pipe) is an error, not a success.
    steermoe::check_stdout();
  } catch (const CLI::ParseError& e) {
    if (dynamic_cast<const CLI::RequiredError*>(&e) != nullptr ||
        dynamic_cast<const CLI::ExtrasError*>(&e) != nullptr) {
      if (const std::string what = not_understood(app, argc, argv); !what.empty()) {
        std::fprintf(stderr, "steermoe: error: %s\n", what.c_str());
        return 1;
      }
    }
    // --help and --version end parsing as "errors" with code 0: CLI11 prints them.
    if (e.get_exit_code() == 0) return app.exit(e);
    // A real parse error: one format for every error (CLI11 uses its own exit codes, 105, 106,
    // ..., and no prefix; steermoe uses status 1 and "steermoe: error:").
    std::fprintf(stderr, "steermoe: error: %s\nRun with --help for more information.\n", e.what());
    return 1;
  } catch (const steermoe::Interrupted&) {
    std::fprintf(stderr, "\nsteermoe: interrupted; no partial output file was kept\n");
    return steermoe::kInterruptExitStatus;
  } catch (const steermoe::Error& e) {
    steermoe::end_stdout_line();
    std::fprintf(stderr, "steermoe: error: %s\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    steermoe::end_stdout_line();
    // Sizes from input are checked before allocating (common/memory_limit.hpp); this is the
    // last resort for an allocation that still does not fit.
    std::fprintf(stderr,
                 "steermoe: error: out of memory: an allocation failed (the input or the flags "
                 "ask for more memory than is available; lower -c, --window, --tokens or the "
                 "model size)\n");
    return 1;
  } catch (const std::exception& e) {
    steermoe::end_stdout_line();
    std::fprintf(stderr, "steermoe: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
