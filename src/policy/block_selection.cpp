#include "policy/block_selection.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/error.hpp"

namespace steermoe::policy {

void validate(const BlockParams& params, const RouterSpec& spec) {
  const int E = spec.experts, K = spec.top_k;
  if (params.pool < K || params.pool > E)
    fail("--pool", "value", "expected {} <= P <= {} (top-k .. experts), found {}", K, E,
         params.pool);
  if (params.union_slots < K || params.union_slots > E)
    fail("--union-slots", "value", "expected {} <= U <= {}, found {}", K, E, params.union_slots);
}

BlockRule parse_block_rule(std::string_view text) {
  if (text == "exact") return BlockRule::kExact;
  if (text == "block") return BlockRule::kBlock;
  if (text == "block:conf") return BlockRule::kBlockConf;
  fail("--spec-select", "value", "expected exact, block or block:conf, found '{}'", text);
}

const char* block_rule_name(BlockRule rule) {
  switch (rule) {
    case BlockRule::kExact:
      return "exact";
    case BlockRule::kBlock:
      return "block";
    case BlockRule::kBlockConf:
      return "block:conf";
  }
  return "exact";
}

BlockSelector::BlockSelector(const RouterSpec& spec, const BlockParams& params,
                             const Calibration& calibration, int max_positions)
    : spec_(spec), params_(params), calibration_(&calibration), max_positions_(max_positions) {
  const int E = spec.experts, K = spec.top_k;
  if (spec.mode != ScoreMode::kSoftmax)
    fail("--spec-select", "router",
         "expected a softmax router (OLMoE, Qwen3-MoE) for block selection");
  validate(params, spec);
  if (!(params.gamma > 0)) fail("--spec-select", "gamma", "expected > 0, found {}", params.gamma);
  SM_ASSERT(max_positions >= 1);
  SM_ASSERT(calibration.layers == spec.layers && calibration.experts == E);
  const auto LE = static_cast<size_t>(spec.layers) * static_cast<size_t>(E);
  stamp_.assign(LE, 0);
  pool_.assign(LE, 0);
  decisions_.resize(static_cast<size_t>(max_positions));
  for (Decision& d : decisions_) {
    d.selected.resize(static_cast<size_t>(K));
    d.selected_slot.assign(static_cast<size_t>(K), 0);
    d.weights.resize(static_cast<size_t>(K));
    d.exact.resize(static_cast<size_t>(K));
    d.has_weights = true;
  }
  probs_.resize(static_cast<size_t>(max_positions) * E);
  topk_.resize(static_cast<size_t>(max_positions) * K);
  demand_.resize(static_cast<size_t>(E));
  in_set_.assign(static_cast<size_t>(E), 0);
  in_union_.assign(static_cast<size_t>(E), 0);
  order_.resize(static_cast<size_t>(E));
  masked_.resize(static_cast<size_t>(E));
  pick_.resize(static_cast<size_t>(K));
  reset();
}

void BlockSelector::reset() {
  const int E = spec_.experts;
  block_ = 0;
  for (int l = 0; l < spec_.layers; ++l) {
    // The warm set: calibration order, first P; stamps below every block's keep that order.
    int64_t* stamp = &stamp_[static_cast<size_t>(l) * E];
    std::fill(stamp, stamp + E, -int64_t{E} - 1);
    const std::vector<int32_t>& warm = calibration_->expert_order[static_cast<size_t>(l)];
    for (size_t r = 0; r < warm.size(); ++r) stamp[warm[r]] = -static_cast<int64_t>(r) - 1;
    refill_pool(l);
  }
}

bool BlockSelector::in_pool(int layer, int expert) const {
  return pool_[static_cast<size_t>(layer) * spec_.experts + expert] != 0;
}

void BlockSelector::save(State& out) const {
  out.block = block_;
  out.stamp = stamp_;
  out.pool = pool_;
}

void BlockSelector::load(const State& in) {
  SM_ASSERT(in.stamp.size() == stamp_.size() && in.pool.size() == pool_.size());
  block_ = in.block;
  stamp_ = in.stamp;
  pool_ = in.pool;
}

void BlockSelector::refill_pool(int layer) {
  const int E = spec_.experts;
  const int64_t* stamp = &stamp_[static_cast<size_t>(layer) * E];
  for (int e = 0; e < E; ++e) order_[static_cast<size_t>(e)] = e;
  // Most recent first, ties to the lower id: a deterministic LRU over whole blocks.
  std::partial_sort(
      order_.begin(), order_.begin() + params_.pool, order_.end(),
      [&](int32_t a, int32_t b) { return stamp[a] != stamp[b] ? stamp[a] > stamp[b] : a < b; });
  uint8_t* pool = &pool_[static_cast<size_t>(layer) * E];
  std::fill(pool, pool + E, 0);
  for (int i = 0; i < params_.pool; ++i) pool[order_[static_cast<size_t>(i)]] = 1;
}

// The eligible set into in_set_ (block rules): A, then the highest-demand experts outside A
// (how many: the entropy of the demand says how spread it is), then pruned to the union slots.
void BlockSelector::choose_set(int n, std::span<const float> /*z*/, std::span<const float> alpha) {
  const int E = spec_.experts, K = spec_.top_k;
  for (int i = 0; i < K; ++i) in_set_[static_cast<size_t>(topk_[static_cast<size_t>(i)])] = 1;
  std::fill(demand_.begin(), demand_.end(), 0.0f);
  for (int d = 1; d < n; ++d) {
    for (int i = 0; i < K; ++i) {
      const int32_t e = topk_[static_cast<size_t>(d) * K + i];
      if (!in_set_[static_cast<size_t>(e)])
        demand_[static_cast<size_t>(e)] +=
            alpha[static_cast<size_t>(d)] * probs_[static_cast<size_t>(d) * E + e];
    }
  }
  double total = 0;
  int m = 0;
  for (int e = 0; e < E; ++e)
    if (demand_[static_cast<size_t>(e)] > 0) {
      total += demand_[static_cast<size_t>(e)];
      ++m;
    }
  double entropy = 0;
  if (total > 0)
    for (int e = 0; e < E; ++e)
      if (const double q = demand_[static_cast<size_t>(e)] / total; q > 0)
        entropy -= q * std::log(q);
  const int extra = std::min(
      m, static_cast<int>(std::ceil(static_cast<double>(params_.gamma) * std::exp(entropy))));
  // Outside A by demand, highest first, ties to the lower id.
  int count = 0;
  for (int e = 0; e < E; ++e)
    if (demand_[static_cast<size_t>(e)] > 0) order_[static_cast<size_t>(count++)] = e;
  auto by_demand = [&](int32_t a, int32_t b) {
    return demand_[static_cast<size_t>(a)] != demand_[static_cast<size_t>(b)]
               ? demand_[static_cast<size_t>(a)] > demand_[static_cast<size_t>(b)]
               : a < b;
  };
  std::sort(order_.begin(), order_.begin() + count, by_demand);
  for (int i = 0; i < extra; ++i) in_set_[static_cast<size_t>(order_[static_cast<size_t>(i)])] = 1;
  last_set_ = K + extra;
  // Prune: members outside the pool beyond the union slots, lowest demand first (never A).
  const uint8_t* pool = &pool_[static_cast<size_t>(current_layer_) * E];
  int outside = 0;
  for (int e = 0; e < E; ++e) outside += in_set_[static_cast<size_t>(e)] && !pool[e];
  for (int i = extra - 1; i >= 0 && outside > params_.union_slots; --i) {
    const int32_t e = order_[static_cast<size_t>(i)];
    if (pool[e]) continue;
    in_set_[static_cast<size_t>(e)] = 0;
    --outside;
    --last_set_;
  }
}

void BlockSelector::route_position(int layer, int d, std::span<const float> z,
                                   std::span<const float> ws, float alpha) {
  const int E = spec_.experts, K = spec_.top_k;
  Decision& out = decisions_[static_cast<size_t>(d)];
  out.layer = layer;
  out.step = block_;
  const int32_t* own = &topk_[static_cast<size_t>(d) * K];
  int chosen = 0;
  if (params_.rule == BlockRule::kExact) {
    for (int i = 0; i < K; ++i) pick_[static_cast<size_t>(i)] = own[i];
    chosen = K;
  } else {
    // Top-K within the set (the rescue first keeps the position's own top-1).
    const bool rescue = params_.rule == BlockRule::kBlockConf && alpha >= params_.rescue &&
                        !in_set_[static_cast<size_t>(own[0])];
    if (rescue) pick_[static_cast<size_t>(chosen++)] = own[0];
    constexpr float kOut = -std::numeric_limits<float>::infinity();
    for (int e = 0; e < E; ++e)
      masked_[static_cast<size_t>(e)] =
          in_set_[static_cast<size_t>(e)] ? z[static_cast<size_t>(e)] : kOut;
    top_k(masked_, masked_, K - chosen,
          std::span<int32_t>(pick_.data() + chosen, static_cast<size_t>(K - chosen)));
    chosen = K;
  }
  std::copy(pick_.begin(), pick_.begin() + chosen, out.selected.begin());
  std::sort(out.selected.begin(), out.selected.end());
  std::copy(own, own + K, out.exact.begin());
  std::sort(out.exact.begin(), out.exact.end());
  out.replaced = 0;
  for (const int32_t e : out.selected)
    out.replaced += !std::binary_search(out.exact.begin(), out.exact.end(), e);
  execution_weights(spec_, ws.empty() ? z : ws, out.selected, out.weights);
  for (const int32_t e : out.selected) in_union_[static_cast<size_t>(e)] = 1;
}

std::span<Decision> BlockSelector::select(int layer, int n, std::span<const float> z,
                                                std::span<const float> weight_scores,
                                                std::span<const float> alpha) {
  const int E = spec_.experts, K = spec_.top_k;
  SM_ASSERT(layer >= 0 && layer < spec_.layers && n >= 1 && n <= max_positions_);
  SM_ASSERT(z.size() >= static_cast<size_t>(n) * E && alpha.size() >= static_cast<size_t>(n));
  current_layer_ = layer;
  if (layer == 0) ++block_;
  for (int d = 0; d < n; ++d) {
    const std::span<const float> row =
        z.subspan(static_cast<size_t>(d) * E, static_cast<size_t>(E));
    // The router softmax in float32, index order (as execution weights compute it).
    float max = -std::numeric_limits<float>::infinity();
    for (const float v : row) max = std::max(max, v);
    float sum = 0;
    float* p = &probs_[static_cast<size_t>(d) * E];
    for (int e = 0; e < E; ++e) sum += (p[e] = std::exp(row[static_cast<size_t>(e)] - max));
    for (int e = 0; e < E; ++e) p[e] /= sum;
    top_k(row, row, K,
          std::span<int32_t>(&topk_[static_cast<size_t>(d) * K], static_cast<size_t>(K)));
  }
  if (params_.rule != BlockRule::kExact) choose_set(n, z, alpha);
  for (int d = 0; d < n; ++d) {
    const size_t off = static_cast<size_t>(d) * E;
    route_position(
        layer, d, z.subspan(off, static_cast<size_t>(E)),
        weight_scores.empty() ? weight_scores : weight_scores.subspan(off, static_cast<size_t>(E)),
        alpha[static_cast<size_t>(d)]);
  }
  // Copies: the block's experts outside the pool; then the pool is refilled by recency.
  const uint8_t* pool = &pool_[static_cast<size_t>(layer) * E];
  int64_t* stamp = &stamp_[static_cast<size_t>(layer) * E];
  last_copies_ = 0;
  int union_size = 0;
  for (int e = 0; e < E; ++e) {
    if (!in_union_[static_cast<size_t>(e)]) continue;
    ++union_size;
    last_copies_ += !pool[e];
    stamp[e] = block_;
    in_union_[static_cast<size_t>(e)] = 0;
  }
  if (params_.rule == BlockRule::kExact) last_set_ = union_size;
  std::fill(in_set_.begin(), in_set_.end(), 0);
  refill_pool(layer);
  return {decisions_.data(), static_cast<size_t>(n)};
}

}  // namespace steermoe::policy
