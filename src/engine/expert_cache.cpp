#include "engine/expert_cache.hpp"

#include <fmt/format.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <vector>

#include "common/error.hpp"
#include "common/machine.hpp"
#include "common/memory_limit.hpp"
#include "engine/cuda_backend_factory.hpp"
#include "engine/model_facts.hpp"
#include "link/disk_link.hpp"
#include "link/emulated_link.hpp"
#include "link/simulated_link.hpp"
#include "model/expert_ranges.hpp"

namespace steermoe::engine {

namespace {

// Experts read from RAM slots. Before handing out an expert it checks, against the scheduler's
// mirror of the physical cache, that the slot's latest copy holds that expert and has completed:
// a wrong or partially copied expert is never computed with.
class SlotStore final : public ExpertStore {
 public:
  SlotStore(const model::Model& model, const link::ExpertLayout& layout,
            const link::SlotArena& arena, link::Link& link,
            const schedule::TransferScheduler& scheduler)
      : model_(model),
        layout_(layout),
        arena_(arena),
        link_(link),
        scheduler_(&scheduler),
        rebased_(static_cast<size_t>(arena.layers()) * arena.slots_per_layer()) {}

  const model::SwigluWeights& expert(int moe_layer, int layer, int expert, int slot) override {
    SM_ASSERT_MSG(scheduler_->physical_expert(moe_layer, slot) == expert,
                  "slot does not physically hold the expert the policy selected");
    SM_ASSERT_MSG(link_.is_complete(scheduler_->slot_ticket(moe_layer, slot)),
                  "expert used before its copy completed");
    model::SwigluWeights& w =
        rebased_[static_cast<size_t>(moe_layer) * arena_.slots_per_layer() + slot];
    w = model::rebase_expert(model_.layer(layer).experts[static_cast<size_t>(expert)], layout_,
                             moe_layer, expert, arena_.slot(moe_layer, slot));
    return w;
  }
  bool all_resident() const override { return false; }

 private:
  const model::Model& model_;
  const link::ExpertLayout& layout_;
  const link::SlotArena& arena_;
  link::Link& link_;
  const schedule::TransferScheduler* scheduler_;
  std::vector<model::SwigluWeights> rebased_;  // [L * C]
};

// Every expert copied once, at construction, from the model's mapping into a slot arena of its
// own (slot e of layer m holds expert e): the all-resident store where the layout allows it.
// Why copy what is already mapped: the mapping's page cache uses 4 KiB pages, the arena 2 MiB
// ones (link::SlotArena), and decode reads every executed expert's bytes once per token; the
// OLMoE-1B-7B shape's compute with every expert in arena slots took 30.6 ms/token against
// 34.8 with 4 KiB slots and 37 from the mapping (Q4_K_M, 2 threads, Intel Xeon). Each expert's
// mapped pages are dropped from this process once copied (the page cache keeps them), so the
// copy does not hold the model twice.
class ArenaResidentStore final : public ExpertStore {
 public:
  ArenaResidentStore(const model::Model& model, const link::ExpertLayout& layout)
      : arena_(layout.layers(), layout.experts(), layout.slot_bytes()),
        weights_(static_cast<size_t>(layout.layers()) * static_cast<size_t>(layout.experts())) {
    const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
    for (int m = 0; m < layout.layers(); ++m) {
      const int layer = layout.model_layer(m);
      for (int e = 0; e < layout.experts(); ++e) {
        std::byte* slot = arena_.slot(m, e);
        for (const link::ExpertPart& part : layout.parts(m, e)) {
          std::memcpy(slot + part.slot_offset, part.source, part.bytes);
          // Only file-backed bytes: dropping an anonymous (converted) buffer's pages would
          // zero them. The pages wholly inside the part (neighbours' pages stay mapped).
          if (part.file < 0) continue;
          const auto begin = reinterpret_cast<uintptr_t>(part.source);
          const uintptr_t first = (begin + page - 1) / page * page;
          const uintptr_t last = (begin + part.bytes) / page * page;
          if (last > first) ::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
        }
        weights_[index(m, e)] = model::rebase_expert(
            model.layer(layer).experts[static_cast<size_t>(e)], layout, m, e, slot);
      }
    }
  }
  const model::SwigluWeights& expert(int moe_layer, int /*layer*/, int expert,
                                     int /*slot*/) override {
    return weights_[index(moe_layer, expert)];
  }
  bool all_resident() const override { return true; }

 private:
  size_t index(int moe_layer, int expert) const {
    return static_cast<size_t>(moe_layer) * static_cast<size_t>(arena_.slots_per_layer()) +
           static_cast<size_t>(expert);
  }
  link::SlotArena arena_;
  std::vector<model::SwigluWeights> weights_;  // [L * E]
};

// The all-resident store: experts copied into an arena of 2 MiB pages where every expert has a
// host source and the arena fits in three quarters of the memory available now (and under
// STEERMOE_MAX_ALLOC_BYTES, common/memory_limit.hpp), else read in
// place from the mapping (a model larger than memory then pages through the page cache, slowly,
// where an arena would be killed for memory).
std::unique_ptr<ExpertStore> resident_store(const model::Model& model) {
  const link::ExpertLayout layout = model::expert_layout(model);
  const uint64_t arena = static_cast<uint64_t>(layout.layers()) *
                         static_cast<uint64_t>(layout.experts()) * layout.slot_bytes();
  const uint64_t available = machine_facts().mem_available;
  if (layout.layers() > 0 && layout.complete() && layout.in_memory() &&
      (available == 0 || arena <= available / 4 * 3) && arena <= allocation_cap_bytes())
    return std::make_unique<ArenaResidentStore>(model, layout);
  return std::make_unique<ResidentExpertStore>(model);
}

CacheStats physical_stats(const schedule::RunTotals& t) {
  CacheStats s;
  s.physical = true;
  s.tokens = t.tokens;
  s.latency_s = t.latency;
  s.demand = t.demand;
  s.prefetch_emitted = t.prefetch_emitted;
  s.prefetch = t.prefetch_enqueued;
  s.prefetch_in_time = t.prefetch_in_time;
  s.prefetch_late = t.prefetch_late;
  s.prefetch_unused = t.prefetch_unused;
  s.prefetch_dropped = t.prefetch_dropped;
  s.stall_s = t.stall;
  s.stall_demand_s = t.stall_on_demand;
  s.stall_prefetch_s = t.stall_on_prefetch;
  s.stall_other_s = t.stall_on_other;
  s.host_s = t.host;
  s.bytes = t.bytes;
  s.link_busy_s = t.link_busy;
  s.warm_copies = t.warm_copies;
  s.restore_copied = t.restore_copies;
  s.block_copied = t.block_copies;
  s.warm_bytes = t.warm_bytes;
  s.warm_s = t.warm_seconds;
  return s;
}

}  // namespace

ExpertCache::ExpertCache(const model::Model& model, const schedule::OffloadConfig& config,
                         const ExpertCacheParams& params)
    : config_(config) {
  const model::ModelConfig& cfg = model.config();
  const int slots = config_.physical_slots();
  const policy::RouterSpec spec = router_spec(cfg);
  switch (kind()) {
    case LinkKind::kResident:
      store_ = resident_store(model);
      break;
    case LinkKind::kSim: {
      profile_ = schedule::load_profile(config_.link.profile, {}, "--link sim:PROFILE");
      auto clock = std::make_unique<link::SimulatedLink>(profile_.link_params());
      sim_clock_ = clock.get();
      link_ = std::move(clock);
      expert_bytes_ = profile_.expert_bytes;
      store_ = resident_store(model);
      break;
    }
    case LinkKind::kCuda:
      layout_ = model::expert_layout(model);
      cuda_ = make_cuda_experts(model, layout_, slots, params.test_copy_delay_max_s,
                                params.test_copy_delay_seed);
      expert_bytes_ = static_cast<int64_t>(layout_.expert_bytes(0, 0));
      break;
    case LinkKind::kEmulated:
    case LinkKind::kDisk:
      layout_ = model::expert_layout(model);
      arena_ =
          std::make_unique<link::SlotArena>(cfg.moe_layer_count(), slots, layout_.slot_bytes());
      expert_bytes_ = static_cast<int64_t>(layout_.expert_bytes(0, 0));
      if (kind() == LinkKind::kEmulated) {
        if (!layout_.in_memory())
          fail(model.path().string(), "experts",
               "expected every expert in the host mapping for the emulated link");
        link::EmulatedLinkParams p = config_.link.emulated;
        p.extra_delay_max_s = params.test_copy_delay_max_s;
        p.delay_seed = params.test_copy_delay_seed;
        link_ = std::make_unique<link::EmulatedLink>(layout_, *arena_, p);
      } else {
        if (!layout_.on_disk())
          fail(model.path().string(), "experts",
               "expected every expert stored as-is in the file for the disk link (converted at "
               "load time: use --link emulated or resident)");
        link::DiskLinkOptions disk;
        disk.verify = config_.verify;
        link_ = std::make_unique<link::DiskLink>(layout_, *arena_, std::move(disk));
      }
      break;
  }
  step_ = std::make_unique<schedule::OffloadStep>(
      spec, config_.policy, *config_.calibration,
      schedule::OffloadParams{.cache_slots = config_.cache_slots,
                              .physical_slots = slots,
                              .max_inflight = config_.max_inflight,
                              .expert_bytes = expert_bytes_,
                              .max_positions = params.max_positions,
                              .pacing = config_.pacing,
                              .issue = config_.issue,
                              .moe_wait = config_.moe_wait},
      link());
  if (sim_clock_ != nullptr) step_->simulate_compute(sim_clock_, &profile_);
  if (config_.block) step_->enable_blocks(*config_.block, params.max_positions);
  // The stores that check a slot's copy before handing out its expert read the scheduler's
  // physical slot map.
  if (arena_)
    store_ = std::make_unique<SlotStore>(model, layout_, *arena_, *link_, *step_->scheduler());
  if (cuda_) cuda_->attach(step_->scheduler());
  step_->begin_request();
  request_start_ = stats();
}

ExpertCache::~ExpertCache() = default;

link::Link* ExpertCache::link() {
  return cuda_ ? &cuda_->link() : link_.get();
}
ExpertStore& ExpertCache::store() {
  return cuda_ ? cuda_->store() : *store_;
}
const ExpertStore& ExpertCache::store() const {
  return cuda_ ? cuda_->store() : *store_;
}

void ExpertCache::begin_request() {
  step_->begin_request();
  request_start_ = stats();
}

void ExpertCache::add_phase_times() {
  if (!step_->offloaded()) return;
  // The link clock's phase times: what a hardware profile needs (steermoe profile), and bench's
  // compute columns.
  for (int l = 0; l < step_->router().spec().layers; ++l) {
    const schedule::LayerTiming& t = step_->timing(l);
    attention_s_ += t.host_start - t.attention_start;
    moe_s_ += t.moe_end - t.moe_start - t.moe_waits;
  }
}

void ExpertCache::run_token(int32_t token, schedule::LayerDriver& driver) {
  const CacheStats before = stats();
  step_->run_token(token, driver);
  add_phase_times();
  last_token_ = stats() - before;
}

void ExpertCache::run_block(std::span<const int32_t> tokens, std::span<const float> alpha,
                            schedule::LayerDriver& driver) {
  const CacheStats before = stats();
  step_->run_block(tokens, alpha, driver);
  add_phase_times();  // a verification block's layers are timed as a token's are
  last_token_ = stats() - before;
}

void ExpertCache::run_layer_major(std::span<const int32_t> tokens, schedule::LayerDriver& driver) {
  const CacheStats before = stats();
  step_->run_layer_major(tokens, driver);
  last_token_ = stats() - before;
}

CacheStats ExpertCache::stats() const {
  const schedule::TransferScheduler* scheduler = step_->scheduler();
  CacheStats s = scheduler != nullptr ? physical_stats(scheduler->totals()) : CacheStats{};
  const schedule::LogicalCounts& c = step_->counts();
  s.routed_tokens = c.tokens;
  s.layer_steps = c.layer_steps;
  s.replaced = c.replaced;
  s.logical_demand = c.demand;
  s.logical_prefetch = c.prefetch;
  s.block_positions = c.block_positions;
  s.block_copies = c.block_copies;
  s.restore_copies = c.restore_copies;
  s.block_prefetched = c.block_prefetch;
  s.attention_s = attention_s_;
  s.moe_s = moe_s_;
  return s;
}

std::string ExpertCache::describe() const {
  switch (kind()) {
    case LinkKind::kResident:
      return "resident";
    case LinkKind::kSim:
      return fmt::format("sim ({})", profile_.name);
    case LinkKind::kEmulated: {
      const auto* e = static_cast<const link::EmulatedLink*>(link_.get());
      return fmt::format("emulated ({:g} GB/s + {:g} us)", e->params().bandwidth_bytes_per_s / 1e9,
                         e->params().latency_s * 1e6);
    }
    case LinkKind::kDisk:
      return "disk (" + static_cast<const link::DiskLink*>(link_.get())->mode() + ")";
    case LinkKind::kCuda:
      return fmt::format("cuda (copy stream, {:.2f} GiB device slots, {} host experts)",
                         static_cast<double>(cuda_->device_bytes()) / (1 << 30),
                         cuda_->pinned() ? "pinned" : "pageable");
  }
  return config_.link.text;
}

}  // namespace steermoe::engine
