// steermoe: one binary, one subcommand per job (`steermoe --help` lists them).
//
// Exit status: 0 on success (and for --help / --version), 1 for every user error (a bad file,
// a bad flag, a CLI parse or range error), 130 when interrupted (Ctrl-C; no partial output
// file is left under its final name).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <new>
#include <string>
#include <string_view>
#include <vector>

#include "cli/commands.hpp"
#include "common/error.hpp"
#include "common/interrupt.hpp"
#include "common/output_file.hpp"
#include "kernels/kernels.hpp"

namespace {

// Edit distance (insert, delete, substitute, swap of neighbours) between option names.
size_t name_distance(std::string_view a, std::string_view b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i)
    for (size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min(
          {d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}

// The command's long options a mistyped one probably meant: within two edits, or the same name
// with a word more or less (`kl --window` for `--window-len`, `perplexity --window-len` for
// `--window`). Empty when none is close.
std::string close_options(const CLI::App& command, const std::string& name) {
  const std::string_view typed = std::string_view(name).substr(2);
  std::vector<std::string> close;
  for (const CLI::Option* option : command.get_options()) {
    for (const std::string& lname : option->get_lnames()) {
      const std::string_view known = lname;
      const bool word_more =
          known.starts_with(typed) && known.size() > typed.size() && known[typed.size()] == '-';
      const bool word_less =
          typed.starts_with(known) && typed.size() > known.size() && typed[known.size()] == '-';
      if (word_more || word_less || name_distance(typed, known) <= 2) close.push_back("--" + lname);
    }
  }
  if (close.empty() || close.size() > 3) return {};
  std::string text = "; did you mean ";
  for (size_t i = 0; i < close.size(); ++i)
    text += (i == 0 ? "" : i + 1 == close.size() ? " or " : ", ") + close[i];
  return text + "?";
}

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
    if (command == nullptr) {
      std::string close;
      for (const CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; }))
        // Two edits turn any two letters into `kl`: short names get one.
        if (name_distance(first, sub->get_name()) <= (first.size() <= 3 ? 1u : 2u))
          close += (close.empty() ? "; did you mean " : " or ") + sub->get_name();
      return "unknown command '" + std::string(first) + "'" + (close.empty() ? "" : close + "?") +
             " (steermoe --help lists them)";
    }
    from = 2;
  }
  for (int i = from; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--") break;
    if (!arg.starts_with("--") || arg.size() == 2) continue;
    const std::string name(arg.substr(0, arg.find('=')));
    if (command->get_option_no_throw(name) == nullptr)
      return "unknown option '" + name + "'" +
             (command == &app ? "" : " for `steermoe " + command->get_name() + "`") +
             close_options(*command, name) + " (" +
             (command == &app ? std::string("steermoe --help lists the options)")
                              : "steermoe " + command->get_name() + " --help lists them)");
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
    steermoe::end_stdout_line();
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
