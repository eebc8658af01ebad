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

#include "cli/commands.hpp"
#include "cli/engine_options.hpp"
#include "common/error.hpp"
#include "engine/engine.hpp"
#include "eval/perplexity.hpp"
#include "tokenizer/tokenizer.hpp"
#include "trace/calibration_file.hpp"

namespace steermoe::cli {

namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, "open", "expected a readable text file");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
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
                  "(input of `steermoe compare --scores`)");
  cmd->add_option("--scores-task", o->scores_task, "Task name written in the --scores lines");
  cmd->final_callback([o] {
    auto model = model::Model::load(o->model);
    const int cache = resolve_cache(o->engine, model->config());
    const std::string calib_path = calibration_path(o->engine, o->model);
    const std::optional<policy::Calibration> calibration =
        load_calibration(calib_path, model->config());
    require_calibration(o->engine.policy, cache, model->config(), calibration.has_value(),
                        o->model);
    const tokenizer::Tokenizer tok = tokenizer::Tokenizer::load(o->model);
    const std::vector<int32_t> ids = tok.encode(read_text(o->file), {.parse_special = false});
    const int bos = o->bos ? tok.bos().value_or(-1) : -1;
    if (o->bos && bos < 0) fail(o->model, "bos", "--bos given but the tokenizer has no BOS token");
    if (ids.size() < 2) fail(o->file, "text", "expected at least 2 tokens, found {}", ids.size());
    engine::Engine engine(
        *model, engine_params(o->engine, o->engine.policy, cache,
                              calibration ? &*calibration : nullptr, o->threads, o->window));
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
      std::ofstream out(o->scores, std::ios::binary | std::ios::trunc);
      for (const eval::WindowNll& w : r.windows)
        out << nlohmann::json{{"task", o->scores_task}, {"id", w.begin}, {"score", w.nll}}.dump()
            << "\n";
      out.close();
      if (!out) fail(o->scores, "write", "could not write the per-window scores");
    }
    nlohmann::json out{{"model", o->model},
                       {"file", o->file},
                       {"text_tokens", ids.size()},
                       {"window", o->window},
                       {"bos", o->bos},
                       {"policy", o->engine.policy},
                       {"cache", cache},
                       {"link", o->engine.link},
                       {"calibration", calib_path},
                       {"windows", per_window.size()},
                       {"scored_tokens", scored},
                       {"nll", mean},
                       {"perplexity", std::exp(mean)},
                       {"seconds", seconds},
                       {"per_window", per_window}};
    std::printf("%s\n", out.dump(2).c_str());
  });
}

}  // namespace steermoe::cli
