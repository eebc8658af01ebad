#include "schedule/offload_step.hpp"

#include <algorithm>

#include "common/error.hpp"
#include "link/simulated_link.hpp"
#include "schedule/profile.hpp"

namespace steermoe::schedule {

OffloadStep::OffloadStep(const policy::RouterSpec& spec, const policy::PolicyConfig& config,
                         const policy::Calibration& calibration, const OffloadParams& params,
                         link::Link* link)
    : config_(config),
      router_(spec, config, calibration, params.cache_slots),
      calibration_(&calibration),
      link_(link),
      experts_(spec.experts),
      max_positions_(params.max_positions),
      timings_(static_cast<size_t>(spec.layers)),
      moe_wait_(params.moe_wait),
      moe_left_(static_cast<size_t>(spec.top_k)),
      moe_part_(static_cast<size_t>(spec.top_k)),
      pregate_(static_cast<size_t>(params.max_positions) * static_cast<size_t>(spec.experts)) {
  SM_ASSERT(params.max_positions >= 1);
  physical_slots_ = std::max(params.cache_slots, params.physical_slots);
  if (link_ != nullptr) {
    scheduler_ =
        std::make_unique<TransferScheduler>(SchedulerConfig{.layers = spec.layers,
                                                            .experts = spec.experts,
                                                            .slots = physical_slots_,
                                                            .max_inflight = params.max_inflight,
                                                            .expert_bytes = params.expert_bytes,
                                                            .pacing = params.pacing,
                                                            .issue = params.issue},
                                            *link_);
    slot_experts_.resize(static_cast<size_t>(spec.layers) * physical_slots_);
  }
}

OffloadStep::~OffloadStep() = default;

void OffloadStep::simulate_compute(link::SimulatedLink* clock, const HardwareProfile* profile) {
  SM_ASSERT(clock == nullptr || static_cast<link::Link*>(clock) == link_);
  sim_clock_ = clock;
  profile_ = profile;
}

double OffloadStep::clock() const {
  return link_ != nullptr ? link_->now() : 0.0;
}

bool OffloadStep::prefetches() const {
  return config_.prefetch_budget > 0 || config_.kind == policy::PolicyKind::kSpec;
}

bool OffloadStep::wants_pregate() const {
  return prefetches() || (selector_ && scheduler_ && selector_->params().prefetch_next);
}

void OffloadStep::begin_request() {
  router_.reset();
  if (selector_) selector_->reset();
  blocks_ran_ = false;
  warmup_s_ = 0;
  if (!scheduler_) return;
  warmup_s_ = scheduler_->begin_request(logical_slot_experts());
}

std::span<const int32_t> OffloadStep::logical_slot_experts() {
  const int layers = router_.spec().layers;
  const int slots = router_.cache_slots();
  const int physical = physical_slots_;
  for (int l = 0; l < layers; ++l) {
    const policy::LayerCache& cache = router_.cache(l);
    // The policy's C slots first; the union slots of verification blocks beyond them start empty.
    for (int s = 0; s < physical; ++s)
      slot_experts_[static_cast<size_t>(l) * physical + s] =
          s < slots ? cache.expert_in_slot(s) : -1;
  }
  return slot_experts_;
}

void OffloadStep::count(const policy::Decision& d) {
  counts_.layer_steps += 1;
  counts_.replaced += d.replaced;
  counts_.demand += static_cast<int64_t>(d.demand.size());
  counts_.prefetch += static_cast<int64_t>(d.prefetch.size());
}

void OffloadStep::keep_pregate(std::span<const float> rows, int n) {
  pregate_valid_ = !rows.empty();
  if (pregate_valid_) {
    const size_t values = static_cast<size_t>(n) * static_cast<size_t>(experts_);
    SM_ASSERT(rows.size() >= values);
    std::copy_n(rows.begin(), values, pregate_.begin());
  }
}

std::span<const float> OffloadStep::kept_pregate(int position) const {
  if (!pregate_valid_) return {};
  const auto e = static_cast<size_t>(experts_);
  return std::span<const float>(pregate_).subspan(static_cast<size_t>(position) * e, e);
}

const TokenStats* OffloadStep::run_token(int32_t token, LayerDriver& driver) {
  SM_ASSERT_MSG(!blocks_ran_, "a plain token after verification blocks needs a new request");
  const int layers = router_.spec().layers;
  const auto e = static_cast<size_t>(experts_);
  begin_token(token);
  pregate_valid_ = false;
  for (int l = 0; l < layers; ++l) {
    begin_layer(l);
    const LayerScores s = driver.scores(l);
    const std::span<const float> next = s.pregate_next.empty() || l + 1 >= layers
                                            ? std::span<const float>{}
                                            : s.pregate_next.first(e);
    const policy::Decision& d =
        host(l, s.z.first(e), s.weight_scores.empty() ? s.weight_scores : s.weight_scores.first(e),
             next);
    driver.routed(l, 0, d, kept_pregate(0));
    keep_pregate(next, 1);
    wait_and_compute(l, driver);
  }
  driver.finish();
  counts_.tokens += 1;
  return end_token();
}

void OffloadStep::run_layer_major(std::span<const int32_t> tokens, LayerDriver& driver) {
  SM_ASSERT_MSG(!scheduler_, "batched routing is logical only: offloaded prefill runs per token");
  const int n = static_cast<int>(tokens.size());
  SM_ASSERT(n >= 1 && n <= max_positions_);
  const int layers = router_.spec().layers;
  const auto e = static_cast<size_t>(experts_);
  pregate_valid_ = false;
  for (int l = 0; l < layers; ++l) {
    const LayerScores s = driver.scores(l);
    const bool part1 = prefetches() && l >= 1;
    for (int t = 0; t < n; ++t) {
      const size_t off = static_cast<size_t>(t) * e;
      const std::span<const float> pregate = kept_pregate(t);
      const policy::Decision& d = route_layer_major(
          l, tokens[static_cast<size_t>(t)], part1 ? pregate : std::span<const float>{},
          s.z.subspan(off, e),
          s.weight_scores.empty() ? s.weight_scores : s.weight_scores.subspan(off, e));
      driver.routed(l, t, d, pregate);
    }
    driver.moe(l);
    keep_pregate(l + 1 < layers ? s.pregate_next : std::span<const float>{}, n);
  }
  driver.finish();
  counts_.tokens += n;
}

void OffloadStep::enable_blocks(const policy::BlockParams& params, int max_positions) {
  selector_ =
      std::make_unique<policy::BlockSelector>(router_.spec(), params, *calibration_, max_positions);
  if (scheduler_) {
    const auto E = static_cast<size_t>(experts_);
    slot_of_.assign(E, -1);
    needed_.assign(E, 0);
    order_.resize(E);
    ranked_.resize(static_cast<size_t>(max_positions) * static_cast<size_t>(router_.spec().top_k));
    block_union_.reserve(E);
    union_slots_.reserve(E);
    victims_.reserve(static_cast<size_t>(physical_slots_));
  }
}

void OffloadStep::run_block(std::span<const int32_t> tokens, std::span<const float> alpha,
                            LayerDriver& driver) {
  SM_ASSERT_MSG(selector_ != nullptr, "run_block without enable_blocks");
  const int n = static_cast<int>(tokens.size());
  SM_ASSERT(alpha.size() == tokens.size());
  const int layers = router_.spec().layers;
  if (scheduler_) {
    // begin_token without the router's: blocks route by the selector, on every link alike.
    scheduler_->begin_token();
    if (sim_clock_ != nullptr) sim_clock_->advance(profile_->dense_s);
    scheduler_->drop_pending();  // a block has no layer boundary to send prefetches at
    blocks_ran_ = true;
  }
  for (int l = 0; l < layers; ++l) {
    begin_layer(l);
    const LayerScores s = driver.scores(l);
    const std::span<policy::Decision> decisions =
        selector_->select(l, n, s.z, s.weight_scores, alpha);
    if (scheduler_) {
      place_block(l, decisions);
      if (selector_->params().prefetch_next && l + 1 < layers && !s.pregate_next.empty())
        prefetch_block_layer(l + 1, n, s.pregate_next, alpha);
    }
    for (int t = 0; t < n; ++t) {
      const policy::Decision& d = decisions[static_cast<size_t>(t)];
      counts_.layer_steps += 1;
      counts_.replaced += d.replaced;
      driver.routed(l, t, d, {});
    }
    counts_.block_copies += selector_->last_copies();
    driver.moe(l);
    if (scheduler_) {
      charge_moe(block_union_.size(), true);  // one batched MoE: each executed expert once
      timings_[static_cast<size_t>(l)].moe_end = clock();
    }
  }
  driver.finish();
  counts_.block_positions += n;
  if (scheduler_) end_token();
}

void OffloadStep::prefetch_block_layer(int layer, int n, std::span<const float> pregate_next,
                                       std::span<const float> alpha) {
  const int E = experts_, K = router_.spec().top_k;
  // Each position's top-K by pre-gate score (ties to the lower id).
  for (int t = 0; t < n; ++t) {
    const float* row = pregate_next.data() + static_cast<size_t>(t) * E;
    for (int e = 0; e < E; ++e) order_[static_cast<size_t>(e)] = e;
    std::partial_sort(
        order_.begin(), order_.begin() + K, order_.end(),
        [row](int32_t a, int32_t b) { return row[a] != row[b] ? row[a] > row[b] : a < b; });
    std::copy_n(order_.begin(), K, ranked_.begin() + static_cast<ptrdiff_t>(t) * K);
  }
  // Where the layer's experts are (union_slots_ keeps them, to clear slot_of_ afterwards), and
  // its free slots: empty ones, then experts outside its pool (never the pool, which the next
  // set is pruned toward), by slot.
  union_slots_.clear();
  victims_.clear();
  for (int s = 0; s < physical_slots_; ++s) {
    const int e = scheduler_->logical_expert(layer, s);
    if (e < 0) {
      victims_.push_back(s);
    } else {
      slot_of_[static_cast<size_t>(e)] = s;
      union_slots_.push_back(e);
    }
  }
  for (int s = 0; s < physical_slots_; ++s) {
    const int e = scheduler_->logical_expert(layer, s);
    if (e >= 0 && !selector_->in_pool(layer, e)) victims_.push_back(s);
  }
  // Rank by rank, root position first: the experts most likely to run get the slots. needed_
  // marks the predicted ones: a victim holding one is skipped.
  size_t next_victim = 0;
  block_union_.clear();
  for (int r = 0; r < K; ++r)
    for (int t = 0; t < n; ++t) {
      // The experts the rule is sure to execute: the root's top-K (always in the set), and
      // under block:conf the rescued top-1 of likely drafts. Predicting the other positions'
      // experts (even under exact verification, which runs them all) copied more than it hid
      // on the simulated RTX 4090 (docs/figures.md).
      const policy::BlockParams& rule = selector_->params();
      const bool sure = t == 0 || (rule.rule == policy::BlockRule::kBlockConf && r == 0 &&
                                   alpha[static_cast<size_t>(t)] >= rule.rescue);
      if (!sure) continue;
      const int32_t e = ranked_[static_cast<size_t>(t) * K + r];
      if (needed_[static_cast<size_t>(e)]) continue;
      needed_[static_cast<size_t>(e)] = 1;
      block_union_.push_back(e);
      if (slot_of_[static_cast<size_t>(e)] >= 0) continue;  // already in a slot
      while (next_victim < victims_.size()) {
        const int held = scheduler_->logical_expert(layer, victims_[next_victim]);
        if (held < 0 || !needed_[static_cast<size_t>(held)]) break;
        ++next_victim;
      }
      if (next_victim == victims_.size()) break;
      scheduler_->place(layer, victims_[next_victim++], e);
      ++counts_.block_prefetch;
    }
  for (const int32_t e : union_slots_) slot_of_[static_cast<size_t>(e)] = -1;
  for (const int32_t e : block_union_) needed_[static_cast<size_t>(e)] = 0;
}

void OffloadStep::place_block(int layer, std::span<policy::Decision> decisions) {
  LayerTiming& timing = timings_[static_cast<size_t>(layer)];
  timing.host_start = clock();
  if (sim_clock_ != nullptr) sim_clock_->advance(profile_->host_policy_s);  // the selection
  timing.host_end = clock();
  // The executed experts of the layer, in first-use order (deterministic).
  block_union_.clear();
  for (const policy::Decision& d : decisions)
    for (const int32_t e : d.selected)
      if (!needed_[static_cast<size_t>(e)]) {
        needed_[static_cast<size_t>(e)] = 1;
        block_union_.push_back(e);
      }
  // Where they are now, and which slots may take the missing ones: empty slots first, then
  // experts outside the block's set and outside the pool, then pool members, each by slot.
  victims_.clear();
  for (int pass = 0; pass < 3; ++pass) {
    for (int s = 0; s < physical_slots_; ++s) {
      const int e = scheduler_->logical_expert(layer, s);
      if (pass == 0) {
        if (e >= 0 && needed_[static_cast<size_t>(e)]) slot_of_[static_cast<size_t>(e)] = s;
        if (e < 0) victims_.push_back(s);
      } else if (e >= 0 && !needed_[static_cast<size_t>(e)] &&
                 selector_->in_pool(layer, e) == (pass == 2)) {
        victims_.push_back(s);
      }
    }
  }
  // The link's slots were sized for the most experts a block of the configured drafts can
  // execute (OffloadConfig::block_slots), so this holds; were it not to, nothing is placed and
  // the marks are cleared first: the step stays usable for the next request.
  size_t missing = 0;
  for (const int32_t e : block_union_) missing += slot_of_[static_cast<size_t>(e)] < 0;
  if (missing > victims_.size()) {
    for (const int32_t e : block_union_) {
      needed_[static_cast<size_t>(e)] = 0;
      slot_of_[static_cast<size_t>(e)] = -1;
    }
    fail("--draft-k", "slots",
         "expected the {} experts a verification block executes at MoE layer {} to fit the {} "
         "slots per layer the link holds (sized for the configured drafts: "
         "OffloadRequest::draft_k)",
         block_union_.size(), layer, physical_slots_);
  }
  size_t next_victim = 0;
  union_slots_.clear();
  for (const int32_t e : block_union_) {
    int32_t& slot = slot_of_[static_cast<size_t>(e)];
    if (slot < 0) slot = victims_[next_victim++];
    scheduler_->place(layer, slot, e);
    union_slots_.push_back(slot);
  }
  for (policy::Decision& d : decisions)
    for (size_t i = 0; i < d.selected.size(); ++i)
      d.selected_slot[i] = slot_of_[static_cast<size_t>(d.selected[i])];
  for (const int32_t e : block_union_) {
    needed_[static_cast<size_t>(e)] = 0;
    slot_of_[static_cast<size_t>(e)] = -1;
  }
  scheduler_->wait_for_layer(layer, union_slots_);
  timing.moe_start = clock();
  timing.moe_waits = 0;  // one batched MoE after the whole wait
}

void OffloadStep::save_blocks(BlockCheckpoint& out) const {
  SM_ASSERT_MSG(selector_ != nullptr && !scheduler_, "block checkpoints are logical only");
  selector_->save(out.selector);
  out.counts = counts_;
}

void OffloadStep::restore_blocks(const BlockCheckpoint& in) {
  SM_ASSERT_MSG(selector_ != nullptr && !scheduler_, "block checkpoints are logical only");
  selector_->load(in.selector);
  counts_ = in.counts;
}

void OffloadStep::begin_token(int32_t token) {
  router_.begin_token(token);
  if (!scheduler_) return;
  scheduler_->begin_token();
  if (sim_clock_ != nullptr) sim_clock_->advance(profile_->dense_s);
}

void OffloadStep::begin_layer(int layer) {
  if (!scheduler_) return;
  timings_[static_cast<size_t>(layer)].attention_start = clock();
  if (sim_clock_ != nullptr) sim_clock_->advance(profile_->attention_s);  // A(l)
}

const policy::Decision& OffloadStep::host(int layer, std::span<const float> z,
                                          std::span<const float> weight_scores,
                                          std::span<const float> pregate_next) {
  std::span<const uint8_t> issued;
  LayerTiming& timing = timings_[static_cast<size_t>(layer)];
  if (scheduler_) {
    timing.host_start = clock();
    issued = scheduler_->begin_host(layer);
  }
  // Part 2 of this layer, then part 1 of the next: the spec's H(l).
  const policy::Decision& d = router_.select(
      layer, z, weight_scores, config_.physical ? issued : std::span<const uint8_t>{});
  std::span<const policy::Copy> next_prefetch;
  if (!pregate_next.empty() && prefetches())
    next_prefetch = router_.prefetch(layer + 1, pregate_next);
  host_layer_ = layer;
  count(d);
  if (scheduler_) {
    if (sim_clock_ != nullptr) sim_clock_->advance(profile_->host_policy_s);  // H(l)
    timing.host_end = clock();
    scheduler_->end_host(layer, d.selected, d.selected_slot, d.demand, next_prefetch);
  }
  return d;
}

void OffloadStep::wait(int layer) {
  SM_ASSERT(layer == host_layer_);
  if (!scheduler_) return;
  scheduler_->wait_for_layer(layer, router_.decision(layer).selected_slot);
  timings_[static_cast<size_t>(layer)].moe_start = clock();
}

void OffloadStep::wait_and_compute(int layer, LayerDriver& driver) {
  if (!scheduler_ || moe_wait_ == MoeWait::kAll) {
    wait(layer);
    driver.moe(layer);
    end_layer(layer);
    return;
  }
  SM_ASSERT(layer == host_layer_);
  const std::span<const int32_t> slots = router_.decision(layer).selected_slot;
  SM_ASSERT(slots.size() <= moe_left_.size());
  size_t left = slots.size();
  for (size_t i = 0; i < left; ++i) moe_left_[i] = static_cast<int32_t>(i);
  LayerTiming& timing = timings_[static_cast<size_t>(layer)];
  timing.moe_waits = 0;
  bool first = true;
  while (left > 0) {
    // The part: every position left whose copy has completed, in the order of S.
    const link::Ticket done = link_->completed();
    size_t part = 0, kept = 0;
    int32_t earliest = -1;  // the slot of the earliest copy still in flight
    link::Ticket earliest_ticket = 0;
    for (size_t j = 0; j < left; ++j) {
      const int32_t i = moe_left_[j];
      const int32_t slot = slots[static_cast<size_t>(i)];
      const link::Ticket t = scheduler_->slot_ticket(layer, slot);
      if (t <= done) {
        moe_part_[part++] = i;
      } else {
        moe_left_[kept++] = i;
        if (earliest < 0 || t < earliest_ticket) {
          earliest = slot;
          earliest_ticket = t;
        }
      }
    }
    if (part == 0) {
      // Nothing to compute: wait for the earliest copy (charged as a stall like kAll's waits).
      // A copy may also complete between completed() and here: the wait then returns at once.
      const double waited =
          scheduler_->wait_for_layer(layer, std::span<const int32_t>(&earliest, 1));
      if (!first) timing.moe_waits += waited;
      continue;
    }
    left = kept;
    if (first) {
      // Waits for nothing; under PrefetchIssue::kEarly it sends the pending prefetches, as
      // kAll's wait does.
      scheduler_->wait_for_layer(layer, {});
      timing.moe_start = clock();
    }
    driver.moe_part(layer, std::span<const int32_t>(moe_part_.data(), part), first, left == 0);
    charge_moe(part, first);  // the fixed share with the first part
    first = false;
  }
  timing.moe_end = clock();
}

void OffloadStep::end_layer(int layer) {
  if (!scheduler_) return;
  charge_moe(router_.decision(layer).selected.size(), true);
  timings_[static_cast<size_t>(layer)].moe_end = clock();
}

void OffloadStep::charge_moe(size_t experts, bool with_fixed) {
  if (sim_clock_ == nullptr) return;
  sim_clock_->advance((with_fixed ? profile_->moe_fixed_s : 0.0) +
                      static_cast<double>(experts) * profile_->moe_per_expert_s);  // M(l)
}

const TokenStats* OffloadStep::end_token() {
  if (!scheduler_) return nullptr;
  if (sim_clock_ != nullptr) sim_clock_->advance(profile_->head_s);
  return &scheduler_->end_token();
}

const policy::Decision& OffloadStep::route_layer_major(int layer, int32_t token,
                                                       std::span<const float> pregate,
                                                       std::span<const float> z,
                                                       std::span<const float> weight_scores) {
  SM_ASSERT_MSG(!scheduler_, "batched routing is logical only: offloaded prefill runs per token");
  router_.begin_token(layer, token);
  if (layer >= 1 && !pregate.empty()) router_.prefetch(layer, pregate);
  host_layer_ = layer;
  const policy::Decision& d = router_.select(layer, z, weight_scores);
  count(d);
  return d;
}

void OffloadStep::mark_rollback(int positions) {
  router_.mark(positions);
}

void OffloadStep::rollback(int kept) {
  counts_.restore_copies += router_.rewind(kept);
  // The physical side follows: slots whose expert the rewind gave back are copied again.
  if (scheduler_) scheduler_->restore(logical_slot_experts());
}

}  // namespace steermoe::schedule
