// The expert cache: the one owner of where experts live while the engine runs and how they
// move. It holds the link (`--link`), the slot memory, the expert store the backend reads
// through, and the routing and scheduling step (policy::RequestRouter + schedule::
// TransferScheduler inside schedule::OffloadStep), wired to each other here and nowhere else.
// Callers run tokens through it and read a statistics value (engine/cache_stats.hpp); nobody
// outside reaches the scheduler.
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
#include <span>
#include <string>

#include "engine/cache_stats.hpp"
#include "engine/expert_store.hpp"
#include "link/expert_layout.hpp"
#include "link/link_spec.hpp"
#include "link/slot_arena.hpp"
#include "model/weights.hpp"
#include "schedule/offload_config.hpp"
#include "schedule/offload_step.hpp"
#include "schedule/profile.hpp"

namespace steermoe::engine {

using link::LinkKind;
class CudaExperts;

struct ExpertCacheParams {
  int max_positions = 1;  // largest block of a batched prefill
  // Test hook (emulated and cuda links): each copy takes an extra random delay in [0, this),
  // seeded, to show that outputs never depend on copy timing.
  double test_copy_delay_max_s = 0;
  uint64_t test_copy_delay_seed = 1;
};

class ExpertCache {
 public:
  // Throws steermoe::Error for a model the link cannot serve.
  ExpertCache(const model::Model& model, const schedule::OffloadConfig& config,
              const ExpertCacheParams& params);
  ~ExpertCache();
  ExpertCache(const ExpertCache&) = delete;
  ExpertCache& operator=(const ExpertCache&) = delete;

  link::LinkKind kind() const { return config_.link.kind; }
  const schedule::OffloadConfig& config() const { return config_; }
  int cache_slots() const { return config_.cache_slots; }
  // True when the policy runs part 1 and so needs pre-gate scores.
  bool prefetches() const { return step_->prefetches(); }
  bool wants_pregate() const { return step_->wants_pregate(); }
  // True when any expert can be read at any time (no copies): a batched prefill may then route
  // a block of tokens layer-major and read every expert of a layer in one block call.
  bool batched_prefill() const { return experts_in_place() && !step_->offloaded(); }
  // True when every expert is addressable at once without copies while decoding (resident and
  // sim links: copied into an arena at construction, or read in place from the mapping).
  bool experts_in_place() const { return store().all_resident(); }

  // New sequence: every layer's cache back to its warm set (warm-up copies: prompt time).
  void begin_request();
  // The step's schedules (schedule/offload_step.hpp), with this cache's link and slots.
  void run_token(int32_t token, schedule::LayerDriver& driver);
  void run_layer_major(std::span<const int32_t> tokens, schedule::LayerDriver& driver);
  // Speculative decoding's verification block (config().block set; logical only).
  void run_block(std::span<const int32_t> tokens, std::span<const float> alpha,
                 schedule::LayerDriver& driver);

  // --spec-select rollback (config().rollback): OffloadStep::mark_rollback and rollback.
  void mark_rollback(int positions) { step_->mark_rollback(positions); }
  void rollback(int kept) { step_->rollback(kept); }
  // OffloadStep::save_blocks / restore_blocks.
  void save_blocks(schedule::OffloadStep::BlockCheckpoint& out) const { step_->save_blocks(out); }
  void restore_blocks(const schedule::OffloadStep::BlockCheckpoint& in) {
    step_->restore_blocks(in);
  }

  // The weights of `expert` of MoE layer `moe_layer` (model layer `layer`) in `slot`, once the
  // step has waited for that slot's copy.
  const model::SwigluWeights& expert(int moe_layer, int layer, int expert, int slot) {
    return store().expert(moe_layer, layer, expert, slot);
  }
  // The step's routing state (decisions, logical caches): for tests and reports.
  const policy::RequestRouter& router() const { return step_->router(); }

  // Since construction; of the last run_token; since the last begin_request.
  CacheStats stats() const;
  const CacheStats& last_token() const { return last_token_; }
  CacheStats request() const { return stats() - request_start_; }

  // Bytes of one expert copy (the profile's under sim, else the layout's).
  int64_t expert_bytes() const { return expert_bytes_; }
  // Bytes of slot memory (0 without slots).
  uint64_t slot_memory_bytes() const { return arena_ ? arena_->total_bytes() : 0; }
  // "disk (io_uring, O_DIRECT)", "emulated (16 GB/s + 5 us)", ...
  std::string describe() const;

 private:
  ExpertStore& store();
  const ExpertStore& store() const;
  link::Link* link();

  schedule::OffloadConfig config_;
  link::ExpertLayout layout_;
  std::unique_ptr<link::SlotArena> arena_;
  schedule::HardwareProfile profile_;
  std::unique_ptr<link::Link> link_;
  link::SimulatedLink* sim_clock_ = nullptr;
  std::unique_ptr<ExpertStore> store_;
  std::unique_ptr<CudaExperts> cuda_;  // --link cuda: link + device slot store
  int64_t expert_bytes_ = 0;
  std::unique_ptr<schedule::OffloadStep> step_;  // after the link: its scheduler uses it
  CacheStats last_token_;
  CacheStats request_start_;
  void add_phase_times();               // the last step's A(l) and M(l), where a link times them
  double attention_s_ = 0, moe_s_ = 0;  // A(l) and M(l) summed over layers and tokens
};

}  // namespace steermoe::engine
