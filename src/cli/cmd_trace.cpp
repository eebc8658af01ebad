// `steermoe trace`: runs a text file through the model (windows of --window tokens, each a
// sequence) and records router scores and pre-gate scores in the trace format
// (docs/trace-format.md) with trace::TraceWriter.
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "cli/checks.hpp"
#include "cli/commands.hpp"
#include "cli/engine_options.hpp"
#include "common/error.hpp"
#include "common/input_file.hpp"
#include "common/memory_limit.hpp"
#include "common/progress.hpp"
#include "engine/engine.hpp"
#include "tokenizer/tokenizer.hpp"
#include "trace/calibration_file.hpp"
#include "trace/trace.hpp"

namespace steermoe::cli {

void add_trace_command(CLI::App& root) {
  struct Options {
    std::string model;
    std::string file;
    std::string output;
    int window = 512;
    int threads = 1;
    int max_tokens = 0;
    bool batched = true;
    EngineOptions engine;
  };
  auto o = std::make_shared<Options>();
  CLI::App* cmd =
      root.add_subcommand("trace", "Record a router trace of a text file (trace format folder)");
  cmd->add_option("-m,--model", o->model, "Model: a .gguf file or a HuggingFace folder")
      ->required();
  cmd->add_option("-f,--file", o->file, "Text file")->required();
  cmd->add_option("-o,--output", o->output, "Trace folder to write")->required();
  cmd->add_option("--window", o->window, "Tokens per sequence")->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--max-tokens", o->max_tokens, "Record at most this many tokens (0: all)")
      ->check(CLI::Range(0, 1 << 30));
  cmd->add_option("-t,--threads", o->threads, "Threads")->check(CLI::Range(1, 1024));
  // --policy: the policy the trace is recorded under (closed loop unless exact).
  add_engine_options(cmd, o->engine);
  cmd->final_callback([o] {
    const std::optional<MemoryBudget> budget = enter_memory_budget(o->engine, o->model);
    auto model = model::Model::load(o->model);
    require_moe_layers(o->model, model->config(), "trace");
    const tokenizer::Tokenizer tok = load_tokenizer_for(o->model, *model);
    std::vector<int32_t> ids = tok.encode(read_text_file(o->file), {.parse_special = false});
    if (o->max_tokens > 0 && ids.size() > static_cast<size_t>(o->max_tokens)) {
      ids.resize(static_cast<size_t>(o->max_tokens));
    }
    if (ids.empty()) fail(o->file, "text", "expected at least one token");
    const model::ModelConfig& cfg = model->config();
    const schedule::OffloadConfig offload =
        resolve_policy(offload_request(o->engine, *model, o->model), o->engine.policy, *model);
    const int cache = offload.cache_slots;
    // Memory scales with the window actually used (at most the text), checked before use.
    const int window =
        static_cast<int>(std::min<size_t>(static_cast<size_t>(o->window), ids.size()));
    check_allocation("trace", "--window",
                     saturating_mul(static_cast<uint64_t>(window),
                                    static_cast<uint64_t>(cfg.moe_layer_count()) *
                                        static_cast<uint64_t>(cfg.experts) * 4 * 3),
                     fmt::format("the router records of a window of {} tokens", window),
                     "expected a window whose records fit in memory (lower --window)");
    check_fits(budget, *model, offload, window);
    engine::Engine engine(*model, engine_params(o->engine, offload, o->threads, window));
    const policy::RouterSpec spec = engine.router_spec();
    trace::TraceMeta meta;
    meta.layers = spec.layers;
    meta.experts = spec.experts;
    meta.top_k = spec.top_k;
    meta.router = spec.mode == policy::ScoreMode::kSigmoid ? "sigmoid" : "softmax";
    for (int l = 0; l < cfg.layers; ++l) {
      if (cfg.moe_layer[static_cast<size_t>(l)]) meta.moe_layer_ids.push_back(l);
    }
    meta.model = o->model;
    meta.n_group = spec.n_group;
    meta.topk_group = spec.topk_group;
    meta.norm_topk_prob = spec.norm_topk_prob;
    meta.routed_scaling_factor = spec.routed_scaling_factor;
    meta.window = spec.default_window;
    meta.vocab = cfg.vocab;
    // A trace recorded under exact routing carries no policy (any exact policy replays it
    // closed loop); any other policy and its cache size are recorded for closed-loop checks.
    if (offload.policy.kind != policy::PolicyKind::kExact) {
      meta.policy = o->engine.policy;
      meta.cache_slots = cache;
      if (!offload.calibration_source.empty())
        meta.calibration = trace::calibration_fingerprint(*offload.calibration);
    }
    const model::LayerWeights& first_moe = model->layer(meta.moe_layer_ids.front());
    meta.expert_bytes = model::matrix_bytes(first_moe.experts[0].gate) +
                        model::matrix_bytes(first_moe.experts[0].up) +
                        model::matrix_bytes(first_moe.experts[0].down);
    meta.extra["model_summary"] = cfg.summary();
    const bool sigmoid = spec.mode == policy::ScoreMode::kSigmoid;
    trace::TraceWriter writer(o->output, meta, sigmoid);
    engine::RoutingRecord record;
    engine.set_recorder(&record);
    const size_t le = static_cast<size_t>(spec.layers) * static_cast<size_t>(spec.experts);
    Progress progress("trace", static_cast<int64_t>(ids.size()), "tokens");
    for (size_t begin = 0; begin < ids.size(); begin += static_cast<size_t>(window)) {
      const size_t end = std::min(ids.size(), begin + static_cast<size_t>(window));
      record.clear();
      engine.reset();
      engine.prefill(std::span<const int32_t>(ids).subspan(begin, end - begin));
      writer.begin_sequence();
      for (size_t t = 0; t < record.steps(); ++t) {
        writer.append_step(
            record.tokens[t], std::span<const float>(record.scores).subspan(t * le, le),
            std::span<const float>(record.pregate).subspan(t * le, le),
            sigmoid ? std::span<const float>(record.weight_scores).subspan(t * le, le)
                    : std::span<const float>());
      }
      progress.advance(static_cast<int64_t>(end - begin));  // throws Interrupted after Ctrl-C
    }
    progress.finish();
    writer.close();  // the folder appears under its name only now (TraceWriter stages it)
    std::fprintf(stderr, "trace: %zu steps, %d MoE layers x %d experts -> %s\n", ids.size(),
                 spec.layers, spec.experts, o->output.c_str());
    if (budget) std::fprintf(stderr, "memory: %s\n", memory_report(budget).c_str());
  });
}

}  // namespace steermoe::cli
