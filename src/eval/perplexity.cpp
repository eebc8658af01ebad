#include "eval/perplexity.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "common/error.hpp"
#include "engine/logprob.hpp"

namespace steermoe::eval {

// The one teacher-forced log-softmax (engine/logprob.hpp), shared with `steermoe score` and the
// server's echo + logprobs so that all of them agree bit for bit.
double token_nll(std::span<const float> logits, int32_t target) {
  return engine::token_nll(logits, target);
}

PerplexityResult perplexity(engine::Engine& engine, int vocab, std::span<const int32_t> ids,
                            const PerplexityOptions& options) {
  SM_ASSERT(options.window >= 2 && vocab > 0);
  const int stride = options.window - (options.bos >= 0 ? 1 : 0);
  SM_ASSERT(stride >= 1);
  const auto V = static_cast<size_t>(vocab);
  std::vector<float> logits(static_cast<size_t>(options.window) * V);
  std::vector<int32_t> window;
  PerplexityResult result;
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t begin = 0; begin + 1 < ids.size(); begin += static_cast<size_t>(stride)) {
    if (options.max_windows > 0 && static_cast<int>(result.windows.size()) >= options.max_windows)
      break;
    const size_t end = std::min(ids.size(), begin + static_cast<size_t>(stride));
    window.clear();
    if (options.bos >= 0) window.push_back(options.bos);
    window.insert(window.end(), ids.begin() + static_cast<ptrdiff_t>(begin),
                  ids.begin() + static_cast<ptrdiff_t>(end));
    if (window.size() < 2) break;
    engine.reset();
    std::span<float> out(logits.data(), window.size() * V);
    engine.prefill(window, out);
    double window_nll = 0.0;
    // Position i predicts window[i + 1]; a BOS is never a target.
    for (size_t i = 0; i + 1 < window.size(); ++i)
      window_nll += token_nll(out.subspan(i * V, V), window[i + 1]);
    const auto n = static_cast<int64_t>(window.size() - 1);
    result.total_nll += window_nll;
    result.scored += n;
    result.windows.push_back({begin, n, window_nll / static_cast<double>(n)});
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return result;
}

}  // namespace steermoe::eval
