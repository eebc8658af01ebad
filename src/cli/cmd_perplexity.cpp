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
#include "engine/engine.hpp"
#include "engine/logprob.hpp"
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
    if (!o->calib.empty()) calibration = trace::read_calibration(o->calib);
    const tokenizer::Tokenizer tok = tokenizer::Tokenizer::load(o->model);
    const std::vector<int32_t> ids = tok.encode(read_text(o->file), {.parse_special = false});
    const int bos = o->bos ? tok.bos().value_or(-1) : -1;
    if (o->bos && bos < 0) fail(o->model, "bos", "--bos given but the tokenizer has no BOS token");
    const int stride = o->window - (bos >= 0 ? 1 : 0);
    if (ids.size() < 2) fail(o->file, "text", "expected at least 2 tokens, found {}", ids.size());
    engine::Engine engine(*model, {.threads = o->threads,
                                   .context = o->window,
                                   .policy = o->policy,
                                   .cache_slots = o->cache,
                                   .calibration = calibration ? &*calibration : nullptr});
    const auto V = static_cast<size_t>(model->config().vocab);
    std::vector<float> logits(static_cast<size_t>(o->window) * V);
    std::vector<int32_t> window;
    nlohmann::json per_window = nlohmann::json::array();
    double total_nll = 0.0;
    int64_t scored = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (size_t begin = 0; begin + 1 < ids.size(); begin += static_cast<size_t>(stride)) {
      if (o->max_windows > 0 && static_cast<int>(per_window.size()) >= o->max_windows) break;
      const size_t end = std::min(ids.size(), begin + static_cast<size_t>(stride));
      window.clear();
      if (bos >= 0) window.push_back(bos);
      window.insert(window.end(), ids.begin() + static_cast<ptrdiff_t>(begin),
                    ids.begin() + static_cast<ptrdiff_t>(end));
      if (window.size() < 2) break;
      engine.reset();
      std::span<float> out(logits.data(), window.size() * V);
      engine.prefill(window, out);
      double window_nll = 0.0;
      // Position i predicts window[i + 1]; a BOS is never a target.
      for (size_t i = 0; i + 1 < window.size(); ++i) {
        window_nll += engine::token_nll(out.subspan(i * V, V), window[i + 1]);
      }
      const auto n = static_cast<int64_t>(window.size() - 1);
      total_nll += window_nll;
      scored += n;
      per_window.push_back({{"begin", begin},
                            {"tokens", n},
                            {"nll", window_nll / static_cast<double>(n)},
                            {"perplexity", std::exp(window_nll / static_cast<double>(n))}});
    }
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
