// Where experts live while the engine runs (`--link`): the link that moves them, the slot
// memory they move into, and the expert store the backend reads them through.
//
//   resident        every expert in place in the mapped model file; the cache is logical only
//                   (it decides routing and which copies an offloading engine would make)
//   sim:PROFILE     experts in place, copies instant, the scheduler on the simulated clock of a
//                   hardware profile: real logits beside predicted latency
//   emulated:GBPS[,LATENCY_US]
//                   experts copied from the host mapping into RAM slots by a copy thread at a set
//                   bandwidth and per-copy latency (PCIe emulated on a CPU machine)
//   disk            experts read from the model file(s) into RAM slots with O_DIRECT through
//                   io_uring (pread fallback): the experts need not fit in RAM
//   cuda            (--backend cuda) experts in pinned host memory, C device slots per layer,
//                   one CUDA copy stream with events (engine/cuda_backend_factory.hpp)
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "engine/expert_store.hpp"
#include "link/expert_layout.hpp"
#include "link/link.hpp"
#include "link/slot_arena.hpp"
#include "model/weights.hpp"
#include "schedule/profile.hpp"
#include "schedule/scheduler.hpp"

namespace steermoe::link {
class SimulatedLink;
}

namespace steermoe::engine {

class CudaExperts;

enum class LinkKind : uint8_t { kResident, kSim, kEmulated, kDisk, kCuda };

struct LinkOptions {
  std::string spec = "resident";  // resident | sim:PROFILE | emulated:GBPS[,LATENCY_US] | disk
  bool verify = false;            // disk: per-expert checksums checked after every copy
  // Test hook (emulated link): each copy takes an extra random delay in [0, this), seeded, to
  // show that outputs never depend on copy timing.
  double test_copy_delay_max_s = 0;
  uint64_t test_copy_delay_seed = 1;
};

// Parses the kind of a --link value (the parameters are checked when the link is built).
LinkKind link_kind(std::string_view spec);

// The link side of one engine: owns the layout, the slots, the link and the store.
class Offload {
 public:
  // `cache_slots` C per MoE layer. Throws steermoe::Error for a bad spec or a model the link
  // cannot serve.
  Offload(const model::Model& model, const LinkOptions& options, int cache_slots);
  ~Offload();
  Offload(const Offload&) = delete;
  Offload& operator=(const Offload&) = delete;

  LinkKind kind() const { return kind_; }
  // Null for `resident`.
  link::Link* link();
  // Set for `sim:PROFILE` (the step charges its durations on this clock).
  link::SimulatedLink* simulated_clock() { return sim_clock_; }
  const schedule::HardwareProfile* profile() const { return sim_clock_ ? &profile_ : nullptr; }
  // Bytes of one expert copy (the profile's under sim, else the layout's).
  int64_t expert_bytes() const { return expert_bytes_; }
  // Bytes of slot memory (0 without slots).
  uint64_t slot_memory_bytes() const { return arena_ ? arena_->total_bytes() : 0; }
  // Connects the store to the scheduler, which knows what each slot physically holds.
  void attach(const schedule::TransferScheduler* scheduler);
  ExpertStore& store();
  // "disk (io_uring, O_DIRECT)", "emulated 16 GB/s + 5 us", ...
  std::string describe() const;

 private:
  LinkKind kind_ = LinkKind::kResident;
  std::string spec_;
  link::ExpertLayout layout_;
  std::unique_ptr<link::SlotArena> arena_;
  schedule::HardwareProfile profile_;
  std::unique_ptr<link::Link> link_;
  link::SimulatedLink* sim_clock_ = nullptr;
  std::unique_ptr<ExpertStore> store_;
  std::unique_ptr<CudaExperts> cuda_;  // --link cuda: link + device slot store
  class SlotStore;
  SlotStore* slot_store_ = nullptr;
  int64_t expert_bytes_ = 0;
};

}  // namespace steermoe::engine
