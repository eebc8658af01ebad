// steermoe: one binary, one subcommand per job (`steermoe --help` lists them).
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string_view>

#include "cli/commands.hpp"
#include "common/error.hpp"
#include "kernels/kernels.hpp"

namespace {

// STEERMOE_KERNELS=scalar|avx2|avx512|avx512bf16 picks the kernel level (default: the best the
// CPU has). avx512bf16 rounds activations to bf16 for BF16 weights; avx512 keeps them f32 (what
// an f32 reference such as HF transformers in float32 computes).
void select_kernels() {
  const char* env = std::getenv("STEERMOE_KERNELS");
  if (env == nullptr || *env == '\0') return;
  using steermoe::kernels::Isa;
  for (const Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Bf16}) {
    if (steermoe::kernels::isa_name(isa) == std::string_view(env)) {
      steermoe::kernels::set_active_isa(isa);
      return;
    }
  }
  steermoe::fail("STEERMOE_KERNELS", "value",
                 "expected scalar, avx2, avx512 or avx512bf16, found {}", env);
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
  try {
    select_kernels();
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
