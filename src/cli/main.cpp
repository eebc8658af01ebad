// steermoe: one binary, one subcommand per job (`steermoe --help` lists them).
#include <cstdio>
#include <exception>

#include "cli/commands.hpp"
#include "common/error.hpp"

int main(int argc, char** argv) {
  CLI::App app{
      "steermoe: inference and expert-cache routing policies for offloaded Mixture-of-Experts "
      "models (prefetch-steered routing)"};
  app.option_defaults()->always_capture_default();
  app.require_subcommand(1);
  app.set_version_flag("--version", "steermoe 0.1.0");
  steermoe::cli::add_all_commands(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const steermoe::Error& e) {
    std::fprintf(stderr, "steermoe: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "steermoe: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
