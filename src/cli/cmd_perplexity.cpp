// `steermoe perplexity`: teacher-forced perplexity of a text file over non-overlapping windows
// (each window a fresh sequence, processed as one batched prompt); JSON on stdout.
#include <chrono>
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
#include "common/error.hpp"
#include "common/input_file.hpp"
#include "common/memory_limit.hpp"
#include "common/progress.hpp"
#include "cli/checks.hpp"
#include "engine/engine.hpp"
#include "tokenizer/tokenizer.hpp"
#include "trace/calibration_file.hpp"

namespace steermoe::cli {

namespace {

std::string read_text(const std::string& path) {
  // Regular files only (a directory or FIFO is refused at once); bounded size.
  return read_input_file(path, "a text file");
}

// -log softmax(logits)[target], in double.
double nll(std::span<const float> logits, int32_t target) {
  float max_logit = logits[0];
  for (float v : logits) max_logit = std::max(max_logit, v);
  double sum = 0.0;
  for (float v : logits) sum += std::exp(static_cast<double>(v) - max_logit);
  return std::log(sum) + max_logit - logits[static_cast<size_t>(target)];
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
    std::string policy = "exact:evict=lru";
    int cache = 0;
    std::string calib;
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
  cmd->add_option("--policy", o->policy, "Routing policy string (policy/README.md)");
  cmd->add_option("--cache", o->cache,
                  "Logical expert-cache slots per MoE layer (0: all experts resident)")
      ->check(CLI::Range(0, 4096));
  cmd->add_option("--calib", o->calib, "Calibration file (.smcal) for cache-aware policies");
  cmd->final_callback([o] {
    auto model = model::Model::load(o->model);
    std::optional<policy::Calibration> calibration;
    if (!o->calib.empty()) calibration = load_calibration_for(o->calib, *model);
    const tokenizer::Tokenizer tok = load_tokenizer_for(o->model, *model);
    const std::vector<int32_t> ids = tok.encode(read_text(o->file), {.parse_special = false});
    const int bos = o->bos ? tok.bos().value_or(-1) : -1;
    if (o->bos && bos < 0) fail(o->model, "bos", "--bos given but the tokenizer has no BOS token");
    const int stride = o->window - (bos >= 0 ? 1 : 0);
    if (ids.size() < 2) fail(o->file, "text", "expected at least 2 tokens, found {}", ids.size());
    // A window longer than the text needs no more room than the text: memory scales with the
    // window actually used, and what it needs is checked before allocating it.
    const int window = static_cast<int>(
        std::min<size_t>(static_cast<size_t>(o->window), ids.size() + (bos >= 0 ? 1 : 0)));
    check_allocation("perplexity", "--window",
                     saturating_mul(static_cast<uint64_t>(window),
                                    static_cast<uint64_t>(model->config().vocab) * 4),
                     fmt::format("the logits of a window of {} tokens", window),
                     "expected a window whose logits fit in memory (lower --window)");
    engine::Engine engine(*model, {.threads = o->threads,
                                   .context = window,
                                   .policy = o->policy,
                                   .cache_slots = o->cache,
                                   .calibration = calibration ? &*calibration : nullptr});
    const auto V = static_cast<size_t>(model->config().vocab);
    std::vector<float> logits(static_cast<size_t>(window) * V);
    std::vector<int32_t> tokens_window;
    nlohmann::json per_window = nlohmann::json::array();
    double total_nll = 0.0;
    int64_t scored = 0;
    const auto t0 = std::chrono::steady_clock::now();
    const size_t planned = o->max_windows > 0 ? std::min(ids.size(), static_cast<size_t>(o->max_windows) *
                                                                        static_cast<size_t>(stride))
                                              : ids.size();
    Progress progress("perplexity", static_cast<int64_t>(planned), "tokens");
    for (size_t begin = 0; begin + 1 < ids.size(); begin += static_cast<size_t>(stride)) {
      if (o->max_windows > 0 && static_cast<int>(per_window.size()) >= o->max_windows) break;
      const size_t end = std::min(ids.size(), begin + static_cast<size_t>(stride));
      tokens_window.clear();
      if (bos >= 0) tokens_window.push_back(bos);
      tokens_window.insert(tokens_window.end(), ids.begin() + static_cast<ptrdiff_t>(begin),
                    ids.begin() + static_cast<ptrdiff_t>(end));
      if (tokens_window.size() < 2) break;
      engine.reset();
      std::span<float> out(logits.data(), tokens_window.size() * V);
      engine.prefill(tokens_window, out);
      double window_nll = 0.0;
      // Position i predicts tokens_window[i + 1]; a BOS is never a target.
      for (size_t i = 0; i + 1 < tokens_window.size(); ++i) {
        window_nll += nll(out.subspan(i * V, V), tokens_window[i + 1]);
      }
      const auto n = static_cast<int64_t>(tokens_window.size() - 1);
      progress.advance(static_cast<int64_t>(end - begin));
      total_nll += window_nll;
      scored += n;
      per_window.push_back({{"begin", begin},
                            {"tokens", n},
                            {"nll", window_nll / static_cast<double>(n)},
                            {"perplexity", std::exp(window_nll / static_cast<double>(n))}});
    }
    progress.finish();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double mean = total_nll / static_cast<double>(scored);
    nlohmann::json out{{"model", o->model},
                       {"file", o->file},
                       {"text_tokens", ids.size()},
                       {"window", o->window},
                       {"bos", o->bos},
                       {"policy", o->policy},
                       {"cache", o->cache},
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
