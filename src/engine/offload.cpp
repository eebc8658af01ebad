#include "engine/offload.hpp"

#include <fmt/format.h>

#include <vector>

#include "common/error.hpp"
#include "engine/cuda_backend_factory.hpp"
#include "link/disk_link.hpp"
#include "link/emulated_link.hpp"
#include "link/simulated_link.hpp"
#include "model/expert_layout.hpp"

namespace steermoe::engine {

// Experts read from RAM slots. Before handing out an expert it checks, against the scheduler's
// mirror of the physical cache, that the slot's latest copy holds that expert and has completed:
// a wrong or partially copied expert is never computed with.
class Offload::SlotStore final : public ExpertStore {
 public:
  SlotStore(const model::Model& model, const link::ExpertLayout& layout,
            const link::SlotArena& arena, link::Link& link)
      : model_(model),
        layout_(layout),
        arena_(arena),
        link_(link),
        rebased_(static_cast<size_t>(arena.layers()) * arena.slots_per_layer()) {}

  void attach(const schedule::TransferScheduler* scheduler) { scheduler_ = scheduler; }

  const model::SwigluWeights& expert(int moe_layer, int layer, int expert, int slot) override {
    SM_ASSERT_MSG(scheduler_ != nullptr, "slot store used before the scheduler was attached");
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
  const schedule::TransferScheduler* scheduler_ = nullptr;
  std::vector<model::SwigluWeights> rebased_;  // [L * C]
};

LinkKind link_kind(std::string_view spec) {
  if (spec == "resident") return LinkKind::kResident;
  if (spec == "disk") return LinkKind::kDisk;
  if (spec.starts_with("sim:")) return LinkKind::kSim;
  if (spec.starts_with("emulated:")) return LinkKind::kEmulated;
  if (spec == "cuda") return LinkKind::kCuda;
  fail("--link", "value",
       "expected resident, disk, emulated:GBPS[,LATENCY_US], sim:PROFILE or cuda, found '{}'",
       spec);
}

Offload::Offload(const model::Model& model, const LinkOptions& options, int cache_slots)
    : kind_(link_kind(options.spec)), spec_(options.spec) {
  if (kind_ == LinkKind::kResident) {
    store_ = std::make_unique<ResidentExpertStore>(model);
    return;
  }
  if (kind_ == LinkKind::kSim) {
    const std::string name = options.spec.substr(4);
    if (name.empty()) fail("--link", "sim", "expected sim:PROFILE (a name or a .json path)");
    profile_ = schedule::load_profile(name);
    auto clock = std::make_unique<link::SimulatedLink>(
        link::SimulatedLinkParams{.bandwidth_bytes_per_s = profile_.link_bandwidth_bytes_per_s,
                                  .latency_s = profile_.link_latency_s});
    sim_clock_ = clock.get();
    link_ = std::move(clock);
    expert_bytes_ = profile_.expert_bytes;
    store_ = std::make_unique<ResidentExpertStore>(model);
    return;
  }
  const model::ModelConfig& cfg = model.config();
  layout_ = model::expert_layout(model);
  if (kind_ == LinkKind::kCuda) {
    cuda_ = make_cuda_experts(model, layout_, cache_slots, options.test_copy_delay_max_s,
                              options.test_copy_delay_seed);
    expert_bytes_ = static_cast<int64_t>(layout_.expert_bytes(0, 0));
    return;
  }
  arena_ =
      std::make_unique<link::SlotArena>(cfg.moe_layer_count(), cache_slots, layout_.slot_bytes());
  expert_bytes_ = static_cast<int64_t>(layout_.expert_bytes(0, 0));
  if (kind_ == LinkKind::kEmulated) {
    if (!layout_.in_memory())
      fail(model.path().string(), "experts",
           "expected every expert in the host mapping for the emulated link");
    link::EmulatedLinkParams params = link::parse_emulated_spec(options.spec);
    params.extra_delay_max_s = options.test_copy_delay_max_s;
    params.delay_seed = options.test_copy_delay_seed;
    link_ = std::make_unique<link::EmulatedLink>(layout_, *arena_, params);
  } else {
    if (!layout_.on_disk())
      fail(model.path().string(), "experts",
           "expected every expert stored as-is in the file for the disk link (converted at "
           "load time: use --link emulated or resident)");
    link::DiskLinkOptions disk;
    disk.verify = options.verify;
    link_ = std::make_unique<link::DiskLink>(layout_, *arena_, std::move(disk));
  }
  auto store = std::make_unique<SlotStore>(model, layout_, *arena_, *link_);
  slot_store_ = store.get();
  store_ = std::move(store);
}

Offload::~Offload() = default;

link::Link* Offload::link() {
  return cuda_ ? &cuda_->link() : link_.get();
}
ExpertStore& Offload::store() {
  return cuda_ ? cuda_->store() : *store_;
}

void Offload::attach(const schedule::TransferScheduler* scheduler) {
  if (slot_store_ != nullptr) slot_store_->attach(scheduler);
  if (cuda_) cuda_->attach(scheduler);
}

std::string Offload::describe() const {
  switch (kind_) {
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
  return spec_;
}

}  // namespace steermoe::engine
