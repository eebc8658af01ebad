#include "eval/scores_from.hpp"

#include <algorithm>

#include "common/error.hpp"

namespace steermoe::eval {

TraceScores::TraceScores(const trace::Trace& trace, int model_moe_layers)
    : trace_(trace), model_layers_(model_moe_layers) {
  if (model_moe_layers < 1) fail("--scores-from", "layers", "expected a MoE model");
}

std::vector<std::vector<int32_t>> TraceScores::windows(int count, int len) {
  std::vector<std::vector<int32_t>> out;
  starts_.clear();
  std::vector<int64_t> seq = trace_.sequence_starts();
  if (seq.empty()) seq.push_back(0);
  seq.push_back(trace_.steps());
  for (size_t s = 0; s + 1 < seq.size() && static_cast<int>(out.size()) < count; ++s) {
    for (int64_t b = seq[s]; b + len <= seq[s + 1] && static_cast<int>(out.size()) < count;
         b += len) {
      const auto tokens = trace_.tokens().subspan(static_cast<size_t>(b), static_cast<size_t>(len));
      out.emplace_back(tokens.begin(), tokens.end());
      starts_.push_back(b);
    }
  }
  if (out.empty()) {
    int64_t longest = 0;
    for (size_t s = 0; s + 1 < seq.size(); ++s) longest = std::max(longest, seq[s + 1] - seq[s]);
    fail(trace_.dir().string(), "steps",
         "expected a sequence of at least {} steps for one window (--window-len), found none: "
         "the longest has {}",
         len, longest);
  }
  return out;
}

bool TraceScores::scores(int position, int moe_layer, std::span<float> z,
                         std::span<float> pregate_next) {
  const int64_t step = base_ + position;
  if (step >= trace_.steps())
    fail(trace_.dir().string(), "steps", "the trace ends at step {}", trace_.steps());
  const int lt = trace_.layers();
  const int layer = moe_layer % lt;
  const auto row = trace_.scores(step, layer);
  std::copy(row.begin(), row.end(), z.begin());
  const int next = layer + 1;
  if (moe_layer + 1 >= model_layers_ || next >= lt) return false;  // no pre-gate at the wrap
  const auto pre = trace_.pregate(step, next);
  std::copy(pre.begin(), pre.end(), pregate_next.begin());
  return true;
}

void TraceScores::weight_scores(int position, int moe_layer, std::span<float> out) {
  const auto row = trace_.weights_scores(base_ + position, moe_layer % trace_.layers());
  std::copy(row.begin(), row.end(), out.begin());
}

policy::Calibration map_calibration_layers(const policy::Calibration& c, int layers) {
  policy::Calibration out;
  out.layers = layers;
  out.experts = c.experts;
  out.top_k = c.top_k;
  out.steps = c.steps;
  for (int m = 0; m < layers; ++m) {
    const auto src = static_cast<size_t>(m % c.layers);
    out.expert_counts.push_back(c.expert_counts[src]);
    out.expert_order.push_back(c.expert_order[src]);
    out.score_range.push_back(c.score_range[src]);
  }
  const policy::TokenPrior& p = c.prior;
  policy::TokenPrior& q = out.prior;
  q.layers = layers;
  q.vocab = p.vocab;
  q.occurrences = p.occurrences;
  if (!p.empty()) {
    q.row_begin.push_back(0);
    for (int m = 0; m < layers; ++m) {
      for (int32_t x = 0; x < p.vocab; ++x) {
        const auto row = p.row(m % c.layers, x);
        q.entries.insert(q.entries.end(), row.begin(), row.end());
        q.row_begin.push_back(q.entries.size());
      }
    }
  }
  out.check("mapped calibration");
  return out;
}

}  // namespace steermoe::eval
