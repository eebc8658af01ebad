#include "trace/calibrate.hpp"

#include <algorithm>

#include "common/error.hpp"
#include "common/progress.hpp"

namespace steermoe::trace {

policy::Calibration calibrate_trace(const Trace& trace, int vocab) {
  // A calibration of nothing (zero score range, an arbitrary warm set) would make every policy
  // that reads it route like exact routing, silently.
  if (trace.steps() == 0)
    fail(trace.dir().string(), "steps",
         "expected at least one routed step to calibrate on, found none");
  if (vocab <= 0) vocab = trace.meta().vocab;
  if (vocab <= 0) {
    int32_t max_token = -1;
    for (int32_t token : trace.tokens()) max_token = std::max(max_token, token);
    vocab = max_token + 1;
  }
  // The token prior is sized by the vocabulary: a stated cap, checked before allocating.
  constexpr int kMaxVocab = 1 << 24;
  if (vocab > kMaxVocab)
    fail(trace.dir().string(), "--vocab", "expected a vocabulary of at most {} tokens, found {}",
         kMaxVocab, vocab);
  if (vocab <= 0)
    fail(trace.dir().string(), "steps",
         "expected a trace with at least one step to calibrate from");
  for (int64_t t = 0; t < trace.steps(); ++t)
    if (trace.token(t) >= vocab)
      fail(trace.dir().string(), fmt::format("step {}: token", t),
           "expected a token id below the vocabulary of {} (--vocab or meta.json's vocab), "
           "found {}",
           vocab, trace.token(t));
  policy::Calibrator calibrator(trace.meta().router_spec(), vocab);
  Progress progress("calibrate", trace.steps(), "steps");
  for (int64_t t = 0; t < trace.steps(); ++t) {
    for (int l = 0; l < trace.layers(); ++l) calibrator.add(l, trace.token(t), trace.scores(t, l));
    calibrator.end_step();
    progress.advance();  // throws Interrupted after Ctrl-C (nothing written yet)
  }
  progress.finish();
  return calibrator.finish();
}

nlohmann::json calibration_report(const policy::Calibration& c, int cache_slots) {
  nlohmann::json report;
  report["layers"] = c.layers;
  report["experts"] = c.experts;
  report["top_k"] = c.top_k;
  report["steps"] = c.steps;
  report["vocab"] = c.prior.vocab;
  uint64_t seen = 0;
  for (uint32_t occ : c.prior.occurrences) seen += occ > 0 ? 1 : 0;
  report["prior_tokens_seen"] = seen;
  report["prior_entries"] = c.prior.entries.size();
  report["score_range"] = c.score_range;
  nlohmann::json heads = nlohmann::json::array();
  for (const auto& order : c.expert_order)
    heads.push_back(
        std::vector<int32_t>(order.begin(), order.begin() + std::min<size_t>(order.size(), 8)));
  report["warm_order_head"] = heads;
  if (cache_slots > 0) {
    const int slots = std::min(cache_slots, c.experts);
    std::vector<double> coverage;
    double total = 0;
    for (int l = 0; l < c.layers; ++l) {
      uint64_t covered = 0;
      for (int i = 0; i < slots; ++i)
        covered += c.expert_counts[l][static_cast<size_t>(c.expert_order[l][i])];
      const double denom = static_cast<double>(c.steps) * c.top_k;
      coverage.push_back(denom > 0 ? static_cast<double>(covered) / denom : 0.0);
      total += coverage.back();
    }
    report["cache"] = cache_slots;
    report["warm_coverage"] = coverage;
    report["warm_coverage_mean"] = c.layers > 0 ? total / c.layers : 0.0;
    report["warm_coverage_note"] =
        "fraction of exact top-K picks of the calibration trace inside the first C warm experts "
        "(in-sample)";
  }
  return report;
}

}  // namespace steermoe::trace
