// Ranking primitives shared by the policies, the calibration and the engine: top-k with the
// spec's tie rules, the model's own (possibly group-limited) selection, execution weights.
#include <algorithm>
#include <cmath>

#include "common/error.hpp"
#include "policy/router.hpp"

namespace steermoe::policy {
namespace {

// True when candidate a ranks before b: higher score, then higher tiebreak, then lower index.
inline bool ranks_before(std::span<const float> score, std::span<const float> tiebreak, int32_t a,
                         int32_t b) {
  if (score[a] != score[b]) return score[a] > score[b];
  if (tiebreak[a] != tiebreak[b]) return tiebreak[a] > tiebreak[b];
  return a < b;
}

}  // namespace

void top_k(std::span<const float> score, std::span<const float> tiebreak, int k,
           std::span<int32_t> out) {
  SM_ASSERT(k >= 0 && static_cast<size_t>(k) <= score.size() &&
            out.size() >= static_cast<size_t>(k));
  SM_ASSERT(tiebreak.size() == score.size());
  if (k == 0) return;
  const int n = static_cast<int>(score.size());
  int filled = 0;
  // Insertion into a sorted buffer of k: E <= a few hundred and k <= 16 in practice, so this
  // beats a heap and never allocates.
  for (int32_t i = 0; i < n; ++i) {
    if (filled == k && !ranks_before(score, tiebreak, i, out[k - 1])) continue;
    int pos = filled < k ? filled++ : k - 1;
    while (pos > 0 && ranks_before(score, tiebreak, i, out[pos - 1])) {
      out[pos] = out[pos - 1];
      --pos;
    }
    out[pos] = i;
  }
}

void model_top_k(const RouterSpec& spec, std::span<const float> selection,
                 std::span<const float> unbonused, std::span<int32_t> out,
                 std::span<float> group_score, std::span<uint8_t> group_kept,
                 std::span<float> masked) {
  const bool grouped = spec.n_group > 1 && spec.topk_group < spec.n_group;
  if (!grouped) {
    top_k(selection, unbonused, spec.top_k, out);
    return;
  }
  // DeepSeek-V3 group-limited selection: a group scores the sum of its two best selection
  // scores; the best topk_group groups are kept (ties to the lower group); experts of the other
  // groups are masked to 0.0 as transformers does (policy-spec: bonus included in the scores).
  const int group_size = spec.experts / spec.n_group;
  for (int g = 0; g < spec.n_group; ++g) {
    float best = -INFINITY, second = -INFINITY;
    for (int i = g * group_size; i < (g + 1) * group_size; ++i) {
      const float v = selection[i];
      if (v > best) {
        second = best;
        best = v;
      } else if (v > second) {
        second = v;
      }
    }
    group_score[g] = group_size >= 2 ? best + second : best;
    group_kept[g] = 0;
  }
  for (int kept = 0; kept < spec.topk_group; ++kept) {
    int best_group = -1;
    for (int g = 0; g < spec.n_group; ++g) {
      if (group_kept[g]) continue;
      if (best_group < 0 || group_score[g] > group_score[best_group]) best_group = g;
    }
    group_kept[best_group] = 1;
  }
  for (int i = 0; i < spec.experts; ++i) {
    masked[i] = group_kept[i / group_size] ? selection[i] : 0.0f;
  }
  top_k(masked.first(spec.experts), unbonused, spec.top_k, out);
}

void execution_weights(const RouterSpec& spec, std::span<const float> weight_scores,
                       std::span<const int32_t> selected, std::span<float> out) {
  const size_t k = selected.size();
  if (spec.mode == ScoreMode::kSoftmax) {
    // Softmax over all E logits in float32, index order, then the entries of S.
    float max_logit = -INFINITY;
    for (float v : weight_scores) max_logit = std::max(max_logit, v);
    float sum = 0.0f;
    for (float v : weight_scores) sum += std::exp(v - max_logit);
    for (size_t i = 0; i < k; ++i) out[i] = std::exp(weight_scores[selected[i]] - max_logit) / sum;
    if (spec.norm_topk_prob) {
      float s = 0.0f;
      for (size_t i = 0; i < k; ++i) s += out[i];
      for (size_t i = 0; i < k; ++i) out[i] /= s;
    }
  } else {
    // Sigmoid scores without the correction bias, normalised over S (+1e-20 as transformers).
    for (size_t i = 0; i < k; ++i) out[i] = weight_scores[selected[i]];
    if (spec.norm_topk_prob) {
      float s = 0.0f;
      for (size_t i = 0; i < k; ++i) s += out[i];
      s += 1e-20f;
      for (size_t i = 0; i < k; ++i) out[i] /= s;
    }
  }
  if (spec.routed_scaling_factor != 1.0f) {
    for (size_t i = 0; i < k; ++i) out[i] *= spec.routed_scaling_factor;
  }
}

}  // namespace steermoe::policy
