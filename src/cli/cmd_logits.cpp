// `steermoe logits`: feeds token ids at positions 0..n-1 (no BOS added) and writes the logits as
// float32 little-endian [n][vocab], the layout of the oracle's logits.bin.
#include <charconv>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "cli/engine_options.hpp"
#include "common/error.hpp"
#include "common/memory_limit.hpp"
#include "common/output_file.hpp"
#include "engine/engine.hpp"

namespace steermoe::cli {

namespace {

std::vector<int32_t> parse_token_list(const std::string& text) {
  std::vector<int32_t> ids;
  size_t pos = 0;
  while (pos <= text.size()) {
    const size_t comma = std::min(text.find(',', pos), text.size());
    int32_t id = 0;
    const char* first = text.data() + pos;
    const char* last = text.data() + comma;
    auto [ptr, ec] = std::from_chars(first, last, id);
    if (ec != std::errc() || ptr != last || first == last) {
      fail("--tokens", "item " + std::to_string(ids.size()), "expected a token id, found '{}'",
           std::string(first, last));
    }
    ids.push_back(id);
    pos = comma + 1;
  }
  return ids;
}

}  // namespace

void add_logits_command(CLI::App& root) {
  struct Options {
    std::string model;
    std::string tokens;
    std::string output;
    bool batched = false;
    int threads = 1;
    EngineOptions engine;
  };
  auto o = std::make_shared<Options>();
  CLI::App* cmd = root.add_subcommand(
      "logits", "Write the logits of a token sequence (float32 little-endian [n][vocab])");
  cmd->add_option("-m,--model", o->model, "Model: a .gguf file or a HuggingFace folder")
      ->required();
  cmd->add_option("--tokens", o->tokens,
                  "Comma-separated token ids, fed at positions 0..n-1 (no BOS added)")
      ->required();
  cmd->add_option("-o,--output", o->output, "Output file")->required();
  cmd->add_flag("--batched", o->batched, "Process the ids as one prompt instead of one at a time");
  cmd->add_option("-t,--threads", o->threads, "Threads")->check(CLI::Range(1, 1024));
  add_engine_options(cmd, o->engine);
  cmd->final_callback([o] {
    const std::vector<int32_t> ids = parse_token_list(o->tokens);
    const std::optional<MemoryBudget> budget = enter_memory_budget(o->engine, o->model);
    auto model = model::Model::load(o->model);
    const auto V = static_cast<size_t>(model->config().vocab);
    const schedule::OffloadConfig offload =
        resolve_policy(offload_request(o->engine, *model, o->model), o->engine.policy, *model);
    const int positions = std::max<int>(static_cast<int>(ids.size()), 1);
    check_fits(budget, *model, offload, positions);
    engine::Engine engine(*model, engine_params(o->engine, offload, o->threads, positions));
    check_allocation("logits", "--tokens", saturating_mul(ids.size(), V * sizeof(float)),
                     fmt::format("the logits of {} tokens", ids.size()), "expected fewer tokens");
    std::vector<float> logits(ids.size() * V);
    if (o->batched) {
      engine.prefill(ids, logits);
    } else {
      for (size_t i = 0; i < ids.size(); ++i) {
        auto row = engine.decode(ids[i]);
        std::copy(row.begin(), row.end(), logits.begin() + static_cast<ptrdiff_t>(i * V));
      }
    }
    write_file_atomic(o->output, std::string_view(reinterpret_cast<const char*>(logits.data()),
                                                  logits.size() * sizeof(float)));
    std::fprintf(stderr, "wrote %zu x %zu logits to %s\n", ids.size(), V, o->output.c_str());
    if (budget) std::fprintf(stderr, "memory: %s\n", memory_report(budget).c_str());
  });
}

}  // namespace steermoe::cli
