// `steermoe perplexity`: teacher-forced perplexity of a text file over non-overlapping windows
// (each window a fresh sequence, processed as one batched prompt); JSON on stdout.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "cli/checks.hpp"
#include "cli/commands.hpp"
#include "cli/engine_options.hpp"
#include "cli/validators.hpp"
#include "common/error.hpp"
#include "common/input_file.hpp"
#include "common/json_input.hpp"
#include "common/memory_limit.hpp"
#include "common/output_file.hpp"
#include "engine/engine.hpp"
#include "eval/perplexity.hpp"
#include "tokenizer/tokenizer.hpp"
#include "trace/calibration_file.hpp"

namespace steermoe::cli {

namespace {

std::string read_text(const std::string& path) {
  // Regular files only (a directory or FIFO is refused at once); bounded size.
  return read_text_file(path);
}

}  // namespace

void add_perplexity_command(CLI::App& root) {
  struct Options {
    std::string model;
    std::string file;
    int window = 512;
    int threads = 1;
    int max_windows = 0;
    bool bos = false;
    EngineOptions engine;
    std::string scores;
    std::string scores_task = "nll";
  };
  auto o = std::make_shared<Options>();
  CLI::App* cmd = root.add_subcommand(
      "perplexity", "Teacher-forced perplexity of a text file over windows; JSON on stdout");
  cmd->add_option("-m,--model", o->model, "Model: a .gguf file or a HuggingFace folder")
      ->required();
  cmd->add_option("-f,--file", o->file, "Text file")->required();
  cmd->add_option("--window", o->window, "Tokens per window (each window is a fresh sequence)")
      ->check(CLI::Range(2, 1 << 20));
  cmd->add_option("--max-windows", o->max_windows, "Score at most this many windows (0: all)")
      ->check(CLI::Range(0, 1 << 30));
  cmd->add_flag("--bos", o->bos, "Start every window with the BOS token (not scored)");
  cmd->add_option("-t,--threads", o->threads, "Threads")->check(CLI::Range(1, 1024));
  add_engine_options(cmd, o->engine);
  cmd->add_option("--scores", o->scores,
                  "Also write per-window mean NLL as JSON lines {task: \"nll\", id: begin, score} "
                  "(input of `steermoe compare --scores`)")
      ->check(WritablePath);
  cmd->add_option("--scores-task", o->scores_task, "Task name written in the --scores lines");
  cmd->final_callback([o] {
    const std::optional<MemoryBudget> budget = enter_memory_budget(o->engine, o->model);
    auto model = model::Model::load(o->model);
    const schedule::OffloadConfig offload =
        resolve_policy(offload_request(o->engine, *model, o->model), o->engine.policy, *model);
    const int cache = offload.cache_slots;
    const tokenizer::Tokenizer tok = load_tokenizer_for(o->model, *model);
    const std::vector<int32_t> ids = tok.encode(read_text(o->file), {.parse_special = false});
    const int bos = o->bos ? tok.bos().value_or(-1) : -1;
    if (o->bos && bos < 0) fail(o->model, "bos", "--bos given but the tokenizer has no BOS token");
    if (ids.size() < 2) fail(o->file, "text", "expected at least 2 tokens, found {}", ids.size());
    // A window longer than the text needs no more room than the text: memory scales with the
    // window actually used (eval::perplexity sizes its logits the same way), checked first.
    const int used_window = static_cast<int>(
        std::min<size_t>(static_cast<size_t>(o->window), ids.size() + (bos >= 0 ? 1 : 0)));
    warn_past_trained_context(model->config(), used_window, "--window");
    check_allocation("perplexity", "--window",
                     saturating_mul(static_cast<uint64_t>(used_window),
                                    static_cast<uint64_t>(model->config().vocab) * 4),
                     fmt::format("the logits of a window of {} tokens", used_window),
                     "expected a window whose logits fit in memory (lower --window)");
    check_fits(budget, *model, offload, used_window);
    engine::Engine engine(*model, engine_params(o->engine, offload, o->threads, used_window));
    const eval::PerplexityResult r =
        eval::perplexity(engine, model->config().vocab, ids,
                         {.window = o->window, .max_windows = o->max_windows, .bos = bos});
    nlohmann::json per_window = nlohmann::json::array();
    for (const eval::WindowNll& w : r.windows) {
      per_window.push_back({{"begin", w.begin},
                            {"tokens", w.tokens},
                            {"nll", w.nll},
                            {"perplexity", std::exp(w.nll)}});
    }
    const double mean = r.mean_nll();
    const int64_t scored = r.scored;
    const double seconds = r.seconds;
    if (!o->scores.empty()) {
      std::string lines;
      for (const eval::WindowNll& w : r.windows)
        lines +=
            dump_json(nlohmann::json{{"task", o->scores_task}, {"id", w.begin}, {"score", w.nll}}) +
            "\n";
      write_file_atomic(o->scores, lines);  // complete or absent
    }
    nlohmann::json out{{"model", o->model},
                       {"file", o->file},
                       {"text_tokens", ids.size()},
                       {"window", o->window},
                       {"bos", o->bos},
                       {"policy", o->engine.policy},
                       {"cache", cache},
                       {"link", o->engine.link},
                       {"calibration", offload.calibration_source},
                       {"windows", per_window.size()},
                       {"scored_tokens", scored},
                       {"nll", mean},
                       {"perplexity", std::exp(mean)},
                       {"seconds", seconds},
                       {"per_window", per_window}};
    std::printf("%s\n", dump_json(out, 2).c_str());
    if (budget) std::fprintf(stderr, "memory: %s\n", memory_report(budget).c_str());
  });
}

}  // namespace steermoe::cli
