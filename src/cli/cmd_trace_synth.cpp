// `steermoe trace-synth`: synthetic router traces at real model shapes (generative model:
// src/trace/README.md).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "cli/commands.hpp"
#include "cli/validators.hpp"
#include "common/error.hpp"
#include "common/memory_limit.hpp"
#include "trace/synth.hpp"

namespace steermoe::cli {

void add_trace_synth_command(CLI::App& root) {
  struct Options {
    trace::SynthParams params;
    std::string output;
    bool force = false;
  };
  auto options = std::make_shared<Options>();
  trace::SynthParams& p = options->params;
  CLI::App* cmd = root.add_subcommand(
      "trace-synth",
      "Write a synthetic router trace at a real model's shape, with controllable temporal "
      "locality, cross-layer predictability and token dependence (deterministic for a seed)");
  cmd->add_option("--shape", p.shape,
                  "Model shape: olmoe (16x64, top-8, softmax), moonlight "
                  "(26x64, top-6, sigmoid + bias), qwen36 (40x256, top-8, softmax)")
      ->check(CLI::IsMember({"olmoe", "moonlight", "qwen36"}));
  cmd->add_option("--tokens", p.tokens, "Total steps T")->check(Positive);
  cmd->add_option("--sequences", p.sequences, "Sequences (requests); T is split evenly")
      ->check(Positive);
  cmd->add_option(
      "--locality", p.locality,
      "Temporal locality X in [0,1): AR(1) coefficient of each expert's logit over tokens");
  cmd->add_option(
      "--predictability", p.predictability,
      "Cross-layer predictability Y in [0,1]: correlation of pre-gate row l with scores row l");
  cmd->add_option("--token-dependence", p.token_dependence,
                  "Token dependence Z >= 0: scale of each token's fixed expert preference");
  cmd->add_option("--popularity", p.popularity,
                  "Scale of the fixed per-(layer, expert) popularity");
  cmd->add_option("--zipf", p.zipf, "Exponent of the Zipf law the token ids are drawn from");
  cmd->add_option("--vocab", p.vocab, "Vocabulary size (0 = the real model's)");
  cmd->add_option("--seed", p.seed, "Seed of the text (token draws, dynamics, pre-gate noise)");
  cmd->add_option(
      "--model-seed", p.model_seed,
      "Seed of the synthetic model (popularity, token preferences, correction bias); keep it "
      "fixed to make a held-out trace of the same model");
  cmd->add_option("-o,--output", options->output, "Trace folder to write")->required();
  cmd->add_flag("--force", options->force,
                "Write a trace larger than 16 GiB (the output size is checked before writing)");
  cmd->final_callback([options] {
    // The output size follows from --tokens and the shape; refuse a runaway size up front
    // instead of streaming toward terabytes.
    const trace::TraceMeta shape = trace::synth_shape_meta(options->params.shape);
    const uint64_t row = static_cast<uint64_t>(shape.layers) * static_cast<uint64_t>(shape.experts);
    const uint64_t per_step = 4 + row * 4 * (shape.router == "sigmoid" ? 3 : 2);
    const uint64_t tokens = static_cast<uint64_t>(std::max<int64_t>(options->params.tokens, 0));
    const uint64_t bytes = saturating_mul(tokens, per_step);
    constexpr uint64_t kUnforcedBytes = uint64_t{16} << 30;
    if (bytes > kUnforcedBytes && !options->force) {
      fail("trace-synth", "--tokens",
           "{} steps of the {} shape would write {} ({} bytes per step); expected at most {} "
           "without --force",
           tokens, options->params.shape, bytes_text(bytes), per_step, bytes_text(kUnforcedBytes));
    }
    {
      std::error_code ec;
      const std::filesystem::path out(options->output);
      const std::filesystem::path parent =
          out.has_parent_path() ? out.parent_path() : std::filesystem::path(".");
      const auto space = std::filesystem::space(parent, ec);
      if (!ec && bytes > space.available) {
        fail("trace-synth", "--tokens", "the trace would need {}, but {} has only {} free",
             bytes_text(bytes), parent.string(), bytes_text(space.available));
      }
    }
    trace::synthesize_trace(options->params, options->output);
    const trace::TraceMeta meta = trace::synth_shape_meta(options->params.shape);
    std::printf(
        "{\"trace\": \"%s\", \"shape\": \"%s\", \"tokens\": %lld, \"sequences\": %lld, \"layers\": "
        "%d, "
        "\"experts\": %d, \"top_k\": %d}\n",
        options->output.c_str(), options->params.shape.c_str(),
        static_cast<long long>(options->params.tokens),
        static_cast<long long>(options->params.sequences), meta.layers, meta.experts, meta.top_k);
  });
}

}  // namespace steermoe::cli
