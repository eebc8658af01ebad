// eval::perplexity on the shipped model against an independent recomputation: windows laid out
// as documented (stride = window - BOS), every target scored once, long-double log-softmax.
#include "eval/perplexity.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "model/weights.hpp"

namespace steermoe::eval {
namespace {

const std::string kModel = std::string(STEERMOE_SOURCE_DIR) + "/models/steer-olmoe-tiny";

long double reference_nll(std::span<const float> logits, int32_t target) {
  long double m = logits[0];
  for (float v : logits) m = std::max<long double>(m, v);
  long double s = 0;
  for (float v : logits) s += std::exp(static_cast<long double>(v) - m);
  return std::log(s) + m - logits[static_cast<size_t>(target)];
}

TEST(Perplexity, WindowsAndNllMatchAnIndependentRecomputation) {
  auto model = model::Model::load(kModel);
  const int V = model->config().vocab;
  std::vector<int32_t> ids;
  for (int i = 0; i < 45; ++i) ids.push_back((i * 37 + 11) % V);
  for (const int bos : {-1, 1}) {
    engine::Engine engine(*model, {.threads = 1, .context = 16});
    const PerplexityResult r = perplexity(engine, V, ids, {.window = 16, .bos = bos});
    const size_t stride = bos >= 0 ? 15 : 16;
    ASSERT_EQ(r.windows.size(), (ids.size() - 1 + stride - 1) / stride);  // last window >= 2
    int64_t scored = 0;
    long double total = 0;
    engine::Engine ref(*model, {.threads = 1, .context = 16});
    std::vector<float> logits(static_cast<size_t>(16) * V);
    for (size_t w = 0; w < r.windows.size(); ++w) {
      const size_t begin = w * stride, end = std::min(ids.size(), begin + stride);
      EXPECT_EQ(r.windows[w].begin, begin);
      std::vector<int32_t> window;
      if (bos >= 0) window.push_back(bos);
      window.insert(window.end(), ids.begin() + static_cast<ptrdiff_t>(begin),
                    ids.begin() + static_cast<ptrdiff_t>(end));
      ref.reset();
      ref.prefill(window, std::span<float>(logits.data(), window.size() * V));
      long double nll = 0;
      for (size_t i = 0; i + 1 < window.size(); ++i)
        nll += reference_nll(std::span<const float>(logits).subspan(i * V, V), window[i + 1]);
      const auto n = static_cast<int64_t>(window.size() - 1);
      EXPECT_EQ(r.windows[w].tokens, n);
      EXPECT_NEAR(r.windows[w].nll, static_cast<double>(nll / n), 1e-12);
      scored += n;
      total += nll;
    }
    // Without a BOS every text token but the first is a target exactly once.
    if (bos < 0) {
      EXPECT_EQ(scored, static_cast<int64_t>(ids.size()) - static_cast<int64_t>(r.windows.size()));
    }
    EXPECT_EQ(r.scored, scored);
    EXPECT_NEAR(r.mean_nll(), static_cast<double>(total / scored), 1e-12);
  }
}

TEST(Perplexity, TokenNllIsMinusLogSoftmax) {
  const std::vector<float> logits{1.0f, 2.0f, 3.0f, -100.0f};
  const double z = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0) + std::exp(-100.0));
  EXPECT_NEAR(token_nll(logits, 2), z - 3.0, 1e-15);
  EXPECT_NEAR(token_nll(logits, 3), z + 100.0, 1e-13);
}

}  // namespace
}  // namespace steermoe::eval
