#include "schedule/offload_step.hpp"

#include "common/error.hpp"
#include "link/simulated_link.hpp"
#include "schedule/profile.hpp"

namespace steermoe::schedule {

OffloadStep::OffloadStep(const policy::RouterSpec& spec, const policy::PolicyConfig& config,
                         const policy::Calibration& calibration, const OffloadParams& params,
                         link::Link* link)
    : config_(config), router_(spec, config, calibration, params.cache_slots), link_(link) {
  if (link_ != nullptr) {
    scheduler_ = std::make_unique<TransferScheduler>(
        SchedulerConfig{.layers = spec.layers,
                        .experts = spec.experts,
                        .slots = params.cache_slots,
                        .max_inflight = params.max_inflight,
                        .expert_bytes = params.expert_bytes},
        *link_);
    slot_experts_.resize(static_cast<size_t>(spec.layers) * params.cache_slots);
  }
}

OffloadStep::~OffloadStep() = default;

void OffloadStep::simulate_compute(link::SimulatedLink* clock, const HardwareProfile* profile) {
  SM_ASSERT(clock == nullptr || static_cast<link::Link*>(clock) == link_);
  sim_clock_ = clock;
  profile_ = profile;
}

double OffloadStep::clock() const { return link_ != nullptr ? link_->now() : 0.0; }

bool OffloadStep::prefetches() const {
  return config_.prefetch_budget > 0 || config_.kind == policy::PolicyKind::kSpec;
}

void OffloadStep::begin_request() {
  router_.reset();
  warmup_s_ = 0;
  if (!scheduler_) return;
  const int layers = router_.spec().layers;
  const int slots = router_.cache_slots();
  for (int l = 0; l < layers; ++l) {
    const policy::LayerCache& cache = router_.cache(l);
    for (int s = 0; s < slots; ++s)
      slot_experts_[static_cast<size_t>(l) * slots + s] = cache.expert_in_slot(s);
  }
  warmup_s_ = scheduler_->begin_request(slot_experts_);
}

void OffloadStep::begin_token(int32_t token) {
  router_.begin_token(token);
  if (!scheduler_) return;
  scheduler_->begin_token();
  if (sim_clock_ != nullptr) sim_clock_->advance(profile_->dense_s);
}

void OffloadStep::begin_layer(int /*layer*/) {
  if (!scheduler_) return;
  timing_.attention_start = clock();
  if (sim_clock_ != nullptr) sim_clock_->advance(profile_->attention_s);  // A(l)
}

const policy::Decision& OffloadStep::host(int layer, std::span<const float> z,
                                          std::span<const float> weight_scores,
                                          std::span<const float> pregate_next) {
  std::span<const uint8_t> issued;
  if (scheduler_) {
    timing_.host_start = clock();
    issued = scheduler_->begin_host(layer);
  }
  // Part 2 of this layer, then part 1 of the next: the spec's H(l).
  const policy::Decision& d =
      router_.select(layer, z, weight_scores, config_.physical ? issued : std::span<const uint8_t>{});
  std::span<const policy::Copy> next_prefetch;
  if (!pregate_next.empty() && layer + 1 < router_.spec().layers)
    next_prefetch = router_.prefetch(layer + 1, pregate_next);
  host_layer_ = layer;
  if (scheduler_) {
    if (sim_clock_ != nullptr) sim_clock_->advance(profile_->host_policy_s);  // H(l)
    timing_.host_end = clock();
    scheduler_->end_host(layer, d.selected, d.selected_slot, d.demand, next_prefetch);
  }
  return d;
}

double OffloadStep::wait(int layer) {
  SM_ASSERT(layer == host_layer_);
  if (!scheduler_) return 0.0;
  const double stall = scheduler_->wait_for_layer(layer, router_.decision(layer).selected_slot);
  timing_.moe_start = clock();
  return stall;
}

void OffloadStep::end_layer(int layer) {
  if (!scheduler_) return;
  if (sim_clock_ != nullptr) {
    const auto executed = static_cast<double>(router_.decision(layer).selected.size());
    sim_clock_->advance(profile_->moe_fixed_s + executed * profile_->moe_per_expert_s);  // M(l)
  }
  timing_.moe_end = clock();
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
  return router_.select(layer, z, weight_scores);
}

}  // namespace steermoe::schedule
