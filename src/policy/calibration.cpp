#include "policy/calibration.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "common/error.hpp"
#include "policy/router.hpp"

namespace steermoe::policy {

std::span<const PriorEntry> TokenPrior::row(int layer, int32_t token) const {
  if (entries.empty() || token < 0 || token >= vocab || layer < 0 || layer >= layers) return {};
  const size_t r =
      static_cast<size_t>(layer) * static_cast<size_t>(vocab) + static_cast<size_t>(token);
  return std::span<const PriorEntry>(entries).subspan(row_begin[r],
                                                      row_begin[r + 1] - row_begin[r]);
}

namespace {

// Experts by count, highest first, ties to the lower index (docs/policy-contract.md "warm set").
std::vector<int32_t> order_by_count(const std::vector<uint64_t>& counts) {
  std::vector<int32_t> order(counts.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return counts[a] > counts[b]; });
  return order;
}

}  // namespace

void Calibration::check(const char* source) const {
  if (layers <= 0 || experts <= 0 || top_k <= 0 || top_k > experts) {
    fail(source, "header", "expected layers > 0 and 0 < top_k <= experts, got L={} E={} K={}",
         layers, experts, top_k);
  }
  if (expert_counts.size() != static_cast<size_t>(layers) ||
      expert_order.size() != static_cast<size_t>(layers) ||
      score_range.size() != static_cast<size_t>(layers)) {
    fail(source, "per-layer tables", "expected {} layers of counts, order and range", layers);
  }
  for (int l = 0; l < layers; ++l) {
    if (expert_counts[l].size() != static_cast<size_t>(experts) ||
        expert_order[l].size() != static_cast<size_t>(experts)) {
      fail(source, fmt::format("layer {} counts/order", l), "expected {} entries", experts);
    }
    if (expert_order[l] != order_by_count(expert_counts[l])) {
      fail(source, fmt::format("layer {} order", l),
           "expected experts ordered by count, highest first, ties to the lower index");
    }
    if (!std::isfinite(score_range[l]) || score_range[l] < 0.0f) {
      fail(source, fmt::format("layer {} score range", l), "expected a finite value >= 0, got {}",
           score_range[l]);
    }
  }
  if (prior.entries.empty()) return;
  if (prior.layers != layers || prior.vocab <= 0 ||
      prior.occurrences.size() != static_cast<size_t>(prior.vocab) ||
      prior.row_begin.size() != static_cast<size_t>(layers) * prior.vocab + 1) {
    fail(source, "token prior", "expected {} layers, vocab > 0, {} occurrence counts and CSR rows",
         layers, prior.vocab);
  }
  if (prior.row_begin.front() != 0 || prior.row_begin.back() != prior.entries.size()) {
    fail(source, "token prior rows", "expected offsets from 0 to the entry count {}",
         prior.entries.size());
  }
  for (int l = 0; l < layers; ++l) {
    for (int32_t t = 0; t < prior.vocab; ++t) {
      const size_t r = static_cast<size_t>(l) * prior.vocab + t;
      const uint64_t b = prior.row_begin[r], e = prior.row_begin[r + 1];
      if (e < b || e > prior.entries.size()) {
        fail(source, fmt::format("token prior row (layer {}, token {})", l, t),
             "expected non-decreasing offsets within the entry count");
      }
      for (uint64_t i = b; i < e; ++i) {
        const PriorEntry& entry = prior.entries[i];
        if (entry.expert >= experts || (i > b && entry.expert <= prior.entries[i - 1].expert) ||
            entry.count == 0 || entry.count > prior.occurrences[t]) {
          fail(source, fmt::format("token prior entry (layer {}, token {})", l, t),
               "expected expert ids < {} strictly increasing and 0 < count <= occurrences {}",
               experts, prior.occurrences[t]);
        }
      }
    }
  }
}

void check_calibration_shape(const Calibration& c, const RouterSpec& spec,
                             const std::string& source, const std::string& field,
                             const std::string& against) {
  if (c.layers == spec.layers && c.experts == spec.experts && c.top_k == spec.top_k) return;
  fail(source, field,
       "expected a calibration of L={} E={} K={} ({} MoE layers, experts, top-k), found L={} "
       "E={} K={}",
       spec.layers, spec.experts, spec.top_k, against, c.layers, c.experts, c.top_k);
}

Calibration uninformed_calibration(const RouterSpec& spec) {
  Calibration c;
  c.layers = spec.layers;
  c.experts = spec.experts;
  c.top_k = spec.top_k;
  c.expert_counts.assign(spec.layers, std::vector<uint64_t>(spec.experts, 0));
  if (spec.layers > 0) c.expert_order.assign(spec.layers, order_by_count(c.expert_counts.front()));
  c.score_range.assign(spec.layers, 0.0f);
  return c;
}

Calibrator::Calibrator(const RouterSpec& spec, int vocab)
    : spec_(spec),
      vocab_(vocab),
      counts_(spec.layers, std::vector<uint64_t>(spec.experts, 0)),
      range_sum_(spec.layers, 0.0),
      range_n_(spec.layers, 0),
      occurrences_(vocab, 0),
      pair_counts_(spec.layers),
      topk_buf_(spec.top_k),
      group_score_(std::max(spec.n_group, 1)),
      group_kept_(std::max(spec.n_group, 1)),
      masked_(spec.experts) {
  if (vocab <= 0) fail("calibration", "vocab", "expected > 0, got {}", vocab);
}

void Calibrator::add(int layer, int32_t token, std::span<const float> z) {
  SM_ASSERT(layer >= 0 && layer < spec_.layers);
  SM_ASSERT(z.size() == static_cast<size_t>(spec_.experts));
  if (token < 0 || token >= vocab_) {
    fail("calibration", "token", "expected an id in [0, {}), got {}", vocab_, token);
  }
  model_top_k(spec_, z, z, topk_buf_, group_score_, group_kept_, masked_);
  float lo = z[0], hi = z[0];
  for (float v : z) {
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  range_sum_[layer] += static_cast<double>(hi - lo);
  range_n_[layer] += 1;
  if (layer == 0) occurrences_[token] += 1;
  for (int32_t e : topk_buf_) {
    counts_[layer][e] += 1;
    pair_counts_[layer][static_cast<uint64_t>(token) * spec_.experts + e] += 1;
  }
}

Calibration Calibrator::finish() const {
  Calibration c;
  c.layers = spec_.layers;
  c.experts = spec_.experts;
  c.top_k = spec_.top_k;
  c.steps = steps_;
  c.expert_counts = counts_;
  for (int l = 0; l < spec_.layers; ++l) {
    c.expert_order.push_back(order_by_count(counts_[l]));
    c.score_range.push_back(
        range_n_[l] ? static_cast<float>(range_sum_[l] / static_cast<double>(range_n_[l])) : 0.0f);
  }
  TokenPrior& p = c.prior;
  p.layers = spec_.layers;
  p.vocab = vocab_;
  p.occurrences = occurrences_;
  p.row_begin.assign(static_cast<size_t>(spec_.layers) * vocab_ + 1, 0);
  for (int l = 0; l < spec_.layers; ++l) {
    std::vector<std::pair<uint64_t, uint32_t>> sorted(pair_counts_[l].begin(),
                                                      pair_counts_[l].end());
    std::sort(sorted.begin(), sorted.end());
    for (const auto& [key, count] : sorted) {
      const uint64_t token = key / spec_.experts;
      p.entries.push_back(PriorEntry{static_cast<uint16_t>(key % spec_.experts), count});
      p.row_begin[static_cast<size_t>(l) * vocab_ + token + 1] += 1;
    }
  }
  for (size_t r = 1; r < p.row_begin.size(); ++r) p.row_begin[r] += p.row_begin[r - 1];
  return c;
}

}  // namespace steermoe::policy
