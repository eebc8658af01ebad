// The per-(token, layer) policy step of docs/policy-contract.md ("The per-(token, layer)
// step", "Eviction priorities", "Numerics"). Every arithmetic operation here is float32 in
// the contract's order; the library is compiled with -ffp-contract=off so no FMA can change a
// bit.
#include "policy/router.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/error.hpp"

namespace steermoe::policy {
namespace {

// Ascending sort of a few ids (K <= a few dozen): insertion sort, no library call.
void sort_small(int32_t* v, int n) {
  for (int i = 1; i < n; ++i) {
    const int32_t x = v[i];
    int p = i;
    while (p > 0 && v[p - 1] > x) {
      v[p] = v[p - 1];
      --p;
    }
    v[p] = x;
  }
}

constexpr float kFastDecay = 0.5f;
constexpr float kFastGain = 0.5f;
constexpr float kSlowDecay = 0.98f;
constexpr float kSlowGain = 1.0f - 0.98f;

}  // namespace

LayerCache::LayerCache(int experts, int slots)
    : slot_of_(experts, -1),
      expert_in_slot_(slots, -1),
      fast_(experts, 0.0f),
      slow_(experts, 0.0f),
      last_use_(experts, 0),
      priority_(experts, 0.0f),
      priority_lru_(experts, 0),
      protected_(experts, 0),
      key_protected_(slots, 0.0f),
      key_selected_(slots, 0.0f),
      slot_expert_(slots, 0.0f) {}

void LayerCache::reset(std::span<const int32_t> warm_order) {
  std::fill(slot_of_.begin(), slot_of_.end(), -1);
  std::fill(expert_in_slot_.begin(), expert_in_slot_.end(), -1);
  const int c = slots();
  SM_ASSERT(warm_order.size() >= static_cast<size_t>(c));
  for (int s = 0; s < c; ++s) {
    slot_of_[warm_order[s]] = s;
    expert_in_slot_[s] = warm_order[s];
  }
  size_ = c;
  std::fill(fast_.begin(), fast_.end(), 0.0f);
  std::fill(slow_.begin(), slow_.end(), 0.0f);
  std::fill(last_use_.begin(), last_use_.end(), 0);
  std::fill(protected_.begin(), protected_.end(), 0);
  range_sum_ = 0.0f;
  range_count_ = 0;
  step_started_ = 0;
}

std::vector<int32_t> LayerCache::resident_sorted() const {
  std::vector<int32_t> out;
  for (int e = 0; e < experts(); ++e) {
    if (slot_of_[e] >= 0) out.push_back(e);
  }
  return out;
}

RequestRouter::RequestRouter(const RouterSpec& spec, const PolicyConfig& config,
                             const Calibration& calib, int cache_slots)
    : spec_(spec), config_(config), calib_(&calib), slots_(cache_slots) {
  validate(config, spec, cache_slots);
  window_ = config.effective_window(spec);
  if (calib.layers != spec.layers || calib.experts != spec.experts) {
    fail("calibration", "shape", "expected {} layers x {} experts (the model's), got {} x {}",
         spec.layers, spec.experts, calib.layers, calib.experts);
  }
  const int e = spec.experts, k = spec.top_k, l = spec.layers;
  const int ranked = std::max(window_, k);
  caches_.reserve(l);
  decisions_.resize(l);
  for (int i = 0; i < l; ++i) {
    caches_.emplace_back(e, cache_slots);
    Decision& d = decisions_[i];
    d.layer = i;
    d.selected.reserve(k);
    d.selected_slot.reserve(k);
    d.weights.reserve(k);
    d.exact.reserve(k);
    d.prefetch.reserve(window_);
    d.demand.reserve(k);
    d.evicted.reserve(window_ + k);
  }
  biased_.resize(e);
  masked_.resize(e);
  in_selected_.assign(e, 0);
  pregate_rank_.assign(l, std::vector<int32_t>(ranked, 0));
  have_pregate_.assign(l, 0);
  since_mark_.assign(l, -1);
  topk_.resize(k);
  exact_.resize(k);
  topj_.resize(std::max(config.protect_top_j, 1));
  in_topj_.assign(e, 0);
  in_exact_.assign(e, 0);
  bonus_set_.assign(e, 0);
  cont_score_.assign(e, 0.0f);
  cont_tiebreak_.assign(e, 0.0f);
  cont_.resize(k);
  topj_scratch_.resize(k);
  group_score_.resize(std::max(spec.n_group, 1));
  group_kept_.resize(std::max(spec.n_group, 1));
  weights_.resize(k);
  layer_step_.assign(l, 0);
  layer_token_.assign(l, 0);
  reset();
}

void RequestRouter::reset() {
  for (int l = 0; l < spec_.layers; ++l) {
    caches_[l].reset(std::span<const int32_t>(calib_->expert_order[l]).first(slots_));
    have_pregate_[l] = 0;
  }
  std::fill(layer_step_.begin(), layer_step_.end(), 0);
  std::fill(layer_token_.begin(), layer_token_.end(), 0);
  std::fill(since_mark_.begin(), since_mark_.end(), -1);
}

void RequestRouter::begin_token(int32_t token) {
  for (int l = 0; l < spec_.layers; ++l) {
    checkpoint(l);
    ++layer_step_[l];
    layer_token_[l] = token;
  }
}

void RequestRouter::begin_token(int layer, int32_t token) {
  SM_ASSERT(layer >= 0 && layer < spec_.layers);
  checkpoint(layer);
  ++layer_step_[layer];
  layer_token_[layer] = token;
}

// The state of `layer` after the steps it has taken since the mark, kept before its next one.
void RequestRouter::checkpoint(int layer) {
  int& since = since_mark_[layer];
  if (since < 0 || since > mark_steps_) return;
  Checkpoint& c = checkpoints_[static_cast<size_t>(layer) * (mark_steps_ + 1) + since];
  c.cache = caches_[layer];  // same sizes: copies without allocating
  c.step = layer_step_[layer];
  c.token = layer_token_[layer];
  ++since;
}

void RequestRouter::mark(int steps) {
  SM_ASSERT(steps >= 1);
  if (steps > mark_steps_ || checkpoints_.empty()) {
    mark_steps_ = std::max(steps, mark_steps_);
    checkpoints_.assign(static_cast<size_t>(spec_.layers) * (mark_steps_ + 1),
                        Checkpoint{.cache = LayerCache(spec_.experts, slots_)});
  }
  std::fill(since_mark_.begin(), since_mark_.end(), 0);
}

int RequestRouter::rewind(int kept) {
  int changed = 0;
  for (int l = 0; l < spec_.layers; ++l) {
    const int since = since_mark_[l];
    SM_ASSERT_MSG(since >= 0, "rewind() without mark()");
    SM_ASSERT_MSG(kept <= since, "rewind() past the steps taken since the mark");
    if (kept < since) {
      const Checkpoint& c = checkpoints_[static_cast<size_t>(l) * (mark_steps_ + 1) + kept];
      const LayerCache& now = caches_[l];
      for (int slot = 0; slot < now.slots(); ++slot) {
        const int e = c.cache.expert_in_slot(slot);
        if (e >= 0 && e != now.expert_in_slot(slot)) ++changed;
      }
      caches_[l] = c.cache;
      layer_step_[l] = c.step;
      layer_token_[l] = c.token;
      have_pregate_[l] = 0;
    }
    since_mark_[l] = -1;
  }
  return changed;
}

// Starts the (step, layer) step once: clears the outputs and B, and fixes the priorities.
void RequestRouter::begin_layer_step(int layer) {
  LayerCache& c = caches_[layer];
  const int64_t step = layer_step_[layer];
  SM_ASSERT_MSG(step > 0, "begin_token must be called before routing a token");
  if (c.step_started_ == step) return;
  c.step_started_ = step;
  Decision& d = decisions_[layer];
  d.step = step;
  d.selected.clear();
  d.selected_slot.clear();
  d.weights.clear();
  d.exact.clear();
  d.prefetch.clear();
  d.demand.clear();
  d.evicted.clear();
  d.replaced = 0;
  d.has_weights = false;
  have_pregate_[layer] = 0;
  std::fill(c.protected_.begin(), c.protected_.end(), 0);
  const int e_count = spec_.experts;
  if (config_.evict == Evict::kA) {
    for (int e = 0; e < e_count; ++e) c.priority_[e] = c.fast_[e] + c.slow_[e];
    const TokenPrior& prior = calib_->prior;
    const int32_t token = layer_token_[layer];
    if (!prior.empty() && token >= 0 && token < prior.vocab) {
      const uint32_t occurrences = prior.occurrences[token];
      for (const PriorEntry& entry : prior.row(layer, token)) {
        const float p = static_cast<float>(entry.count) / static_cast<float>(occurrences);
        c.priority_[entry.expert] = (c.fast_[entry.expert] + c.slow_[entry.expert]) + p;
      }
    }
    if (fast_argmin()) {
      constexpr float kInf = std::numeric_limits<float>::infinity();
      for (int slot = 0; slot < c.slots(); ++slot) {
        const int e = c.expert_in_slot_[slot];
        const float key = e >= 0 ? c.priority_[e] : kInf;
        c.key_protected_[slot] = key;
        c.key_selected_[slot] = key;
        c.slot_expert_[slot] = static_cast<float>(e);
      }
    }
  } else {
    for (int e = 0; e < e_count; ++e) c.priority_lru_[e] = c.last_use_[e];
  }
}

// Lowest priority among residents not excluded; ties to the lower expert index. Returns -1 when
// every resident is excluded.
int RequestRouter::argmin_priority(const LayerCache& c, bool skip_selected,
                                   bool skip_protected) const {
  int best = -1;
  const bool use_a = config_.evict == Evict::kA;
  for (int s = 0; s < c.slots(); ++s) {
    const int e = c.expert_in_slot_[s];
    if (e < 0) continue;
    if (skip_selected && in_selected_[e]) continue;
    if (skip_protected && c.protected_[e]) continue;
    if (best < 0) {
      best = e;
      continue;
    }
    const bool lower = use_a ? (c.priority_[e] < c.priority_[best] ||
                                (c.priority_[e] == c.priority_[best] && e < best))
                             : (c.priority_lru_[e] < c.priority_lru_[best] ||
                                (c.priority_lru_[e] == c.priority_lru_[best] && e < best));
    if (lower) best = e;
  }
  return best;
}

// argmin_priority for the A priority over the per-slot keys: the minimum key (A priorities are
// finite: two EMAs in [0, 1] plus a frequency in [0, 1]), then the lowest expert id among the
// slots holding it; -1 when every key is +inf (all excluded). Plain loops of min and compare
// that the compiler vectorises (no data-dependent branch).
int RequestRouter::argmin_slot_keys(const LayerCache& c, const std::vector<float>& key) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  const int n = c.slots();
  const float* k = key.data();
  const float* id = c.slot_expert_.data();
  float lo = kInf;
  for (int s = 0; s < n; ++s) lo = k[s] < lo ? k[s] : lo;
  if (!(lo < kInf)) return -1;
  float best = kInf;
  for (int s = 0; s < n; ++s) {
    const float cand = k[s] == lo ? id[s] : kInf;
    best = cand < best ? cand : best;
  }
  return static_cast<int>(best);
}

// Inserts `expert`, evicting `victim` (or taking the lowest free slot when victim < 0).
int RequestRouter::insert(LayerCache& c, int expert, int victim, int64_t step, Decision& d) {
  int slot;
  if (victim >= 0) {
    slot = c.slot_of_[victim];
    c.slot_of_[victim] = -1;
    d.evicted.push_back(victim);
    --c.size_;
  } else {
    SM_ASSERT(c.size_ < c.slots());
    slot = 0;
    while (c.expert_in_slot_[slot] >= 0) ++slot;
  }
  c.expert_in_slot_[slot] = expert;
  c.slot_of_[expert] = slot;
  ++c.size_;
  c.last_use_[expert] = step;
  return slot;
}

std::span<const Copy> RequestRouter::prefetch(int layer, std::span<const float> pregate) {
  SM_ASSERT(layer >= 1 && layer < spec_.layers);
  SM_ASSERT(pregate.size() == static_cast<size_t>(spec_.experts));
  const int budget = config_.prefetch_budget;
  const bool speculative = config_.kind == PolicyKind::kSpec;
  // n = 0 means no part 1 at all (contract "Part 1"): nothing inserted and nothing protected,
  // so the step's B stays empty. Speculative execution still needs the ranking for S.
  if (budget == 0 && !speculative) return {};
  begin_layer_step(layer);
  LayerCache& c = caches_[layer];
  Decision& d = decisions_[layer];
  // g: the pre-gate ranking (ties: lower index), walked by the window gate and kept for
  // speculative execution; the bonus gate walks the predicted selection instead.
  const bool window_gate = config_.gate == PrefetchGate::kWindow;
  std::vector<int32_t>& g = pregate_rank_[layer];
  if (window_gate || speculative) {
    top_k(pregate, pregate, static_cast<int>(g.size()), g, path_);
    have_pregate_[layer] = 1;
  }
  if (budget == 0) return {};
  std::span<const int32_t> candidates = std::span<const int32_t>(g).first(window_);
  if (!window_gate) {
    // The predicted selection: the bonused top-K of the pre-gate scores against R before any
    // insertion of this step, so that a copy is made only for an expert part 2 would
    // demand-load if the prediction held. Its residents are all protected before anything is
    // inserted (the prediction keeps them); the window walk protects in rank order instead, as
    // the paper's Algorithm 1 does.
    bonused_top_k_plain(c, pregate, {}, config_.lambda * range_before_step(layer));
    candidates = topk_;
    for (const int32_t e : candidates) {
      if (c.resident(e)) protect_resident(c, e);
    }
  }
  int inserted = 0;
  for (const int32_t e : candidates) {
    if (c.resident(e)) {
      protect_resident(c, e);
      continue;
    }
    if (inserted >= budget) continue;
    int victim = -1;
    if (c.size_ == c.slots()) {
      victim = fast_argmin() ? argmin_slot_keys(c, c.key_protected_)
                             : argmin_priority(c, /*skip_selected=*/false, /*skip_protected=*/true);
      if (victim < 0) break;  // [decided] window wider than the cache: stop part 1
    }
    const int slot = insert(c, e, victim, layer_step_[layer], d);
    c.protected_[e] = 1;
    if (fast_argmin()) {
      c.key_protected_[slot] = std::numeric_limits<float>::infinity();
      c.key_selected_[slot] = c.priority_[e];
      c.slot_expert_[slot] = static_cast<float>(e);
    }
    d.prefetch.push_back(Copy{e, slot});
    ++inserted;
  }
  return d.prefetch;
}

// Adds the resident `e` to B (and takes its slot out of the part-1 victim keys).
void RequestRouter::protect_resident(LayerCache& c, int e) {
  c.protected_[e] = 1;
  if (fast_argmin()) c.key_protected_[c.slot_of_[e]] = std::numeric_limits<float>::infinity();
}

float RequestRouter::range_before_step(int layer) const {
  const LayerCache& c = caches_[layer];
  if (config_.range == RangeMode::kFixed || c.range_count_ == 0) return calib_->score_range[layer];
  return c.range_sum_ / static_cast<float>(c.range_count_);
}

float RequestRouter::layer_range(int layer, std::span<const float> z) {
  if (config_.range == RangeMode::kFixed) return calib_->score_range[layer];
  LayerCache& c = caches_[layer];
  float lo = z[0], hi = z[0];
  for (float v : z) {
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  c.range_sum_ += hi - lo;
  c.range_count_ += 1;
  return c.range_sum_ / static_cast<float>(c.range_count_);
}

// The bonused selection as the contract writes it: biased = z + bonus on the bonus set (router
// top-J included), then the model's own selection of biased with z breaking ties.
void RequestRouter::bonused_top_k_plain(const LayerCache& c, std::span<const float> z,
                                        std::span<const uint8_t> issued, float bonus) {
  const int e_count = spec_.experts;
  const int j = config_.protect_top_j;
  if (j > 0) {
    top_k(z, z, j, topj_, path_);
    for (int i = 0; i < j; ++i) in_topj_[topj_[i]] = 1;
  }
  // biased = z + bonus, with bonus 0 for experts that get none (z + 0 == z): written as one
  // branch-free loop the compiler vectorises.
  const int32_t* slot_of = c.slot_of_.data();
  const uint8_t* topj = in_topj_.data();
  float* biased = biased_.data();
  if (config_.physical) {
    for (int e = 0; e < e_count; ++e) {
      biased[e] = z[e] + ((issued[e] | topj[e]) != 0 ? bonus : 0.0f);
    }
  } else {
    for (int e = 0; e < e_count; ++e) {
      biased[e] = z[e] + (((slot_of[e] >= 0) | (topj[e] != 0)) ? bonus : 0.0f);
    }
  }
  if (j > 0) {
    for (int i = 0; i < j; ++i) in_topj_[topj_[i]] = 0;
  }
  model_top_k(spec_, biased_, z, topk_, group_score_, group_kept_, masked_, path_);
}

// The same selection from the router's top-K (exact_, already computed) without a second full
// top-K. With a bonus b >= 0 on a set B, the bonused order restricted to B is B's own z order
// (z -> z + b is monotone and ties on z + b fall back to z, then the index), and likewise outside
// B; so the bonused top-K is the first K of the merge of B's z ranking and the rest's z ranking.
// If an expert of B outranks one outside B in z, it still does with the bonus, so the merge takes
// no more experts outside B than exact_ holds (they are exact_'s, in its order), and of B it needs
// exact_'s members of B followed by the best of B outside exact_: a continuation of K - a'
// entries (a' = |B n exact_|). Requires finite z (a total order); returns false otherwise.
bool RequestRouter::fused_bonused_top_k(const LayerCache& c, std::span<const float> z,
                                        std::span<const uint8_t> issued, float bonus) {
  const int e_count = spec_.experts;
  const int k = spec_.top_k;
  const int j = config_.protect_top_j;
  // The router's top-J is the first J of its top-K (the same order on the same scores).
  for (int i = 0; i < j; ++i) in_topj_[exact_[i]] = 1;
  for (int i = 0; i < k; ++i) in_exact_[exact_[i]] = 1;
  const int32_t* slot_of = c.slot_of_.data();
  const uint8_t* topj = in_topj_.data();
  const uint8_t* in_exact = in_exact_.data();
  uint8_t* bset = bonus_set_.data();
  float* cs = cont_score_.data();
  float* ct = cont_tiebreak_.data();
  constexpr float kLowest = -std::numeric_limits<float>::max();
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  int members = 0;
  int finite = 1;
  if (config_.physical) {
    for (int e = 0; e < e_count; ++e) bset[e] = static_cast<uint8_t>((issued[e] | topj[e]) != 0);
  } else {
    for (int e = 0; e < e_count; ++e) {
      bset[e] = static_cast<uint8_t>((slot_of[e] >= 0) | (topj[e] != 0));
    }
  }
  // Continuation candidates: B outside exact_, scored by z; the rest rank after every candidate
  // (score -FLT_MAX with tiebreak -inf loses even to a candidate of z = -FLT_MAX).
  for (int e = 0; e < e_count; ++e) {
    const float v = z[e];
    const bool cand = (bset[e] != 0) & (in_exact[e] == 0);
    cs[e] = cand ? v : kLowest;
    ct[e] = cand ? v : kNegInf;
    members += bset[e];
    finite &= static_cast<int>((v - v) == 0.0f);
  }
  for (int i = 0; i < k; ++i) in_exact_[exact_[i]] = 0;
  for (int i = 0; i < j; ++i) in_topj_[exact_[i]] = 0;
  if (!finite) return false;
  // Split exact_ into its members of B (rank order) and the rest (rank order).
  int32_t* in_b = cont_.data();  // reused below: members of B first, then the continuation
  int a = 0;
  int32_t* out_b = topj_scratch_.data();
  int nb = 0;
  for (int i = 0; i < k; ++i) {
    const int32_t e = exact_[i];
    if (bset[e]) {
      in_b[a++] = e;
    } else {
      out_b[nb++] = e;
    }
  }
  const int more = std::min(k, members) - a;
  if (more > 0) {
    top_k(cont_score_, cont_tiebreak_, more, std::span<int32_t>(in_b + a, more), path_);
  }
  const int nr = a + std::max(more, 0);
  // Merge by the bonused rule: higher z + bonus (bonus on B), then higher z, then lower index.
  int ir = 0, in = 0;
  for (int r = 0; r < k; ++r) {
    bool take_b;
    if (ir == nr) {
      take_b = false;
    } else if (in == nb) {
      take_b = true;
    } else {
      const int32_t x = in_b[ir], y = out_b[in];
      const float bx = z[x] + bonus, by = z[y] + 0.0f;
      take_b = bx != by ? bx > by : (z[x] != z[y] ? z[x] > z[y] : x < y);
    }
    topk_[r] = take_b ? in_b[ir++] : out_b[in++];
  }
  return true;
}

const Decision& RequestRouter::select(int layer, std::span<const float> z,
                                      std::span<const float> weight_scores,
                                      std::span<const uint8_t> issued) {
  SM_ASSERT(layer >= 0 && layer < spec_.layers);
  SM_ASSERT(z.size() == static_cast<size_t>(spec_.experts));
  begin_layer_step(layer);
  LayerCache& c = caches_[layer];
  Decision& d = decisions_[layer];
  const int e_count = spec_.experts;
  const int k = spec_.top_k;

  // The router's own selection: executed by `exact`, and the statistics' indicator always.
  model_top_k(spec_, z, z, exact_, group_score_, group_kept_, masked_, path_);

  const float range = layer_range(layer, z);
  const bool bonus_active = config_.lambda != 0.0f && (config_.kind == PolicyKind::kCachePrior ||
                                                       config_.kind == PolicyKind::kPsr);
  std::span<const int32_t> chosen = exact_;
  if (config_.kind == PolicyKind::kSpec && have_pregate_[layer]) {
    // Speculative execution: S = g[0:K], the pre-gate's own ranking.
    chosen = std::span<const int32_t>(pregate_rank_[layer]).first(k);
  } else if (bonus_active) {
    if (config_.physical && issued.size() != static_cast<size_t>(e_count)) {
      fail("policy '" + config_.to_string() + "'", "physical mode",
           "needs the scheduler's issued-copies mask of {} experts (use `sim`, not `replay`)",
           e_count);
    }
    const float bonus = config_.lambda * range;
    const bool grouped = spec_.n_group > 1 && spec_.topk_group < spec_.n_group;
    if (path_ == TopKPath::kReference || grouped || !(bonus >= 0.0f) || !std::isfinite(bonus) ||
        !fused_bonused_top_k(c, z, issued, bonus)) {
      bonused_top_k_plain(c, z, issued, bonus);
    }
    chosen = topk_;
  }

  // S ascending; the selected mask drives victim choice.
  for (int i = 0; i < k; ++i) d.selected.push_back(chosen[i]);
  sort_small(d.selected.data(), k);
  for (int i = 0; i < k; ++i) d.exact.push_back(exact_[i]);
  sort_small(d.exact.data(), k);
  for (int e : d.selected) in_selected_[e] = 1;
  const bool fast = fast_argmin();
  if (fast) {
    for (int e : d.selected) {
      if (c.resident(e)) {
        c.key_protected_[c.slot_of_[e]] = std::numeric_limits<float>::infinity();
        c.key_selected_[c.slot_of_[e]] = std::numeric_limits<float>::infinity();
      }
    }
  }

  // Demand insertions for S \ R in increasing index order.
  for (int e : d.selected) {
    if (c.resident(e)) continue;
    int victim = -1;
    if (c.size_ == c.slots()) {
      if (fast) {
        victim = argmin_slot_keys(c, c.key_protected_);
        if (victim < 0) victim = argmin_slot_keys(c, c.key_selected_);
      } else {
        victim = argmin_priority(c, /*skip_selected=*/true, /*skip_protected=*/true);
        if (victim < 0) {
          victim = argmin_priority(c, /*skip_selected=*/true, /*skip_protected=*/false);
        }
      }
      SM_ASSERT(victim >= 0);  // C >= K guarantees a non-selected resident exists
    }
    const int slot = insert(c, e, victim, layer_step_[layer], d);
    if (fast) {
      c.key_protected_[slot] = std::numeric_limits<float>::infinity();
      c.key_selected_[slot] = std::numeric_limits<float>::infinity();
      c.slot_expert_[slot] = static_cast<float>(e);
    }
    d.demand.push_back(Copy{e, slot});
  }
  for (int e : d.selected) {
    d.selected_slot.push_back(c.slot_of_[e]);
    c.last_use_[e] = layer_step_[layer];
    in_selected_[e] = 0;
  }

  // Replaced experts: |S \ exact| (both ascending).
  {
    size_t a = 0, b = 0;
    int common = 0;
    while (a < d.selected.size() && b < d.exact.size()) {
      if (d.selected[a] == d.exact[b]) {
        ++common, ++a, ++b;
      } else if (d.selected[a] < d.exact[b]) {
        ++a;
      } else {
        ++b;
      }
    }
    d.replaced = k - common;
  }

  // Execution weights from the unbonused router output at S.
  std::span<const float> ws = weight_scores;
  if (ws.empty() && spec_.mode == ScoreMode::kSoftmax) ws = z;
  if (compute_weights_ && !ws.empty()) {
    SM_ASSERT(ws.size() == static_cast<size_t>(e_count));
    execution_weights(spec_, ws, d.selected, weights_);
    for (int i = 0; i < k; ++i) d.weights.push_back(weights_[i]);
    d.has_weights = true;
  }

  // Statistics: EMAs of "e in the exact top-K", updated at the end of the step.
  if (config_.evict == Evict::kA) {
    // in_selected_ is all zero here (cleared after the demand loop).
    for (int i = 0; i < k; ++i) in_selected_[exact_[i]] = 1;
    for (int e = 0; e < e_count; ++e) {
      const float indicator = in_selected_[e] ? 1.0f : 0.0f;
      c.fast_[e] = kFastDecay * c.fast_[e] + kFastGain * indicator;
      c.slow_[e] = kSlowDecay * c.slow_[e] + kSlowGain * indicator;
    }
    for (int i = 0; i < k; ++i) in_selected_[exact_[i]] = 0;
  }
  return d;
}

}  // namespace steermoe::policy
