// What one engine keeps resident, by part, and whether it fits a memory budget: the non-expert
// weights (moved to 2 MiB pages at load), every expert held in memory (resident and sim links:
// copied into an arena; emulated: in place in the mapping), the L x C cache slots (disk and
// emulated links) and the KV
// cache for the whole context. A budget that cannot hold them is refused before anything is
// loaded, with the parts and the largest cache that would fit.
#pragma once

#include <cstdint>
#include <string>

#include "model/weights.hpp"
#include "schedule/offload_config.hpp"

namespace steermoe::engine {

struct MemoryPlan {
  uint64_t weight_bytes = 0;      // the model's weight file(s)
  uint64_t non_expert_bytes = 0;  // attention, routers, shared experts, embeddings, head
  uint64_t expert_bytes = 0;      // every routed expert
  uint64_t in_place_bytes = 0;    // every expert held in memory (resident, sim, emulated links)
  uint64_t slot_bytes = 0;        // L x C slots
  uint64_t slot_bytes_per_c = 0;  // one more slot in every MoE layer
  uint64_t kv_bytes = 0;          // KV cache at the full context
  uint64_t overhead_bytes = 0;    // activations, scratch, threads, allocator (an allowance)
  uint64_t total() const {
    return non_expert_bytes + in_place_bytes + slot_bytes + kv_bytes + overhead_bytes;
  }
};

MemoryPlan plan_memory(const model::Model& model, const schedule::OffloadConfig& offload,
                       int context);

// Throws steermoe::Error ("--mem-limit", ...) when `plan` exceeds `budget_bytes`, naming each
// part and the largest --cache that fits (or that none does, and why).
// `kv_sized_by`: the option that sets the KV cache's positions, named when it is a large part
// (-c; run's budget counts its prompt and -n instead).
void check_memory_budget(const MemoryPlan& plan, const schedule::OffloadConfig& offload,
                         uint64_t budget_bytes, int top_k, int experts,
                         const char* kv_sized_by = "-c");

// "non-expert 1.1 GiB + slots 0.8 GiB (C 16) + KV 12 MiB + overhead 256 MiB = 2.2 GiB".
std::string describe(const MemoryPlan& plan, int cache_slots);

}  // namespace steermoe::engine
