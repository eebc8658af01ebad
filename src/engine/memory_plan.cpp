#include "engine/memory_plan.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "common/error.hpp"
#include "common/memory_limit.hpp"
#include "model/expert_ranges.hpp"

namespace steermoe::engine {

namespace {

// Activations, scratch arenas, thread stacks, the allocator's slack and the binary itself: a
// measured allowance (steer-olmoe-small and the OLMoE-1B-7B shape peak at 60-200 MiB beyond
// weights, slots and KV), not a computed size.
constexpr uint64_t kOverheadBytes = uint64_t{256} << 20;

uint64_t kv_bytes(const model::ModelConfig& cfg, int context) {
  uint64_t per_position = 0;
  const auto per_layer = static_cast<uint64_t>(cfg.kv_heads) *
                         (static_cast<uint64_t>(cfg.q_head_dim()) + cfg.v_dim()) * sizeof(float);
  for (int l = 0; l < cfg.layers; ++l)
    if (!cfg.is_linear(l)) per_position += per_layer;
  return saturating_mul(per_position, static_cast<uint64_t>(std::max(context, 0)));
}

}  // namespace

MemoryPlan plan_memory(const model::Model& model, const schedule::OffloadConfig& offload,
                       int context) {
  const model::ModelConfig& cfg = model.config();
  MemoryPlan p;
  const link::ExpertLayout layout = model::expert_layout(model);
  for (const link::ExpertFile& f : layout.files()) p.weight_bytes += f.size;
  for (int m = 0; m < layout.layers(); ++m)
    for (int e = 0; e < layout.experts(); ++e) p.expert_bytes += layout.expert_bytes(m, e);
  p.non_expert_bytes = p.weight_bytes > p.expert_bytes ? p.weight_bytes - p.expert_bytes : 0;
  const link::LinkKind kind = offload.link.kind;
  const bool slots = kind == link::LinkKind::kDisk || kind == link::LinkKind::kEmulated;
  // The emulated link copies from the mapping, so every expert stays resident as well.
  const bool in_place = kind != link::LinkKind::kDisk && kind != link::LinkKind::kCuda;
  p.in_place_bytes = in_place ? p.expert_bytes : 0;
  p.slot_bytes_per_c = slots ? static_cast<uint64_t>(layout.layers()) * layout.slot_bytes() : 0;
  p.slot_bytes = p.slot_bytes_per_c * static_cast<uint64_t>(offload.physical_slots());
  p.kv_bytes = kv_bytes(cfg, context);
  p.overhead_bytes = kOverheadBytes;
  return p;
}

std::string describe(const MemoryPlan& p, int cache_slots) {
  std::string out = "non-expert weights " + bytes_text(p.non_expert_bytes);
  if (p.in_place_bytes > 0) out += " + experts in place " + bytes_text(p.in_place_bytes);
  if (p.slot_bytes > 0)
    out += fmt::format(" + slots {} (C {})", bytes_text(p.slot_bytes), cache_slots);
  out += " + KV " + bytes_text(p.kv_bytes) + " + overhead " + bytes_text(p.overhead_bytes);
  return out + " = " + bytes_text(p.total());
}

void check_memory_budget(const MemoryPlan& p, const schedule::OffloadConfig& offload,
                         uint64_t budget, int top_k, int experts, const char* kv_sized_by) {
  if (p.total() <= budget) return;
  const std::string parts = describe(p, offload.cache_slots);
  const uint64_t fixed = p.total() - p.slot_bytes;
  // The KV cache is what -c sizes: named when it is a large part of what did not fit.
  const std::string kv_hint = p.kv_bytes >= p.total() / 4
                                  ? fmt::format(" (the KV cache of {} is a large part: lower {})",
                                                bytes_text(p.kv_bytes), kv_sized_by)
                                  : std::string();
  if (p.slot_bytes_per_c == 0) {
    if (p.total() - p.in_place_bytes > budget)
      fail("--mem-limit", "budget",
           "expected {} to hold {}; even without the experts the rest needs {}{}",
           bytes_text(budget), parts, bytes_text(p.total() - p.in_place_bytes), kv_hint);
    fail("--mem-limit", "budget",
         "expected {} to hold {}; with experts read in place it cannot: use --link disk (experts "
         "streamed into {} slots) or a larger budget",
         bytes_text(budget), parts, p.in_place_bytes > 0 ? "L x C" : "cache");
  }
  const uint64_t room = budget > fixed ? budget - fixed : 0;
  const auto c_max = static_cast<int64_t>(room / p.slot_bytes_per_c);
  if (c_max >= top_k) {
    fail("--mem-limit", "budget",
         "expected {} to hold {}; it holds at most --cache {} ({} of {} experts per layer){}",
         bytes_text(budget), parts, std::min<int64_t>(c_max, experts), c_max, experts, kv_hint);
  }
  // Name both halves: the fixed parts alone may fit, and then it is the top-k slots that do not.
  fail("--mem-limit", "budget",
       "expected {} to hold {}; not even --cache {} (top-k) fits: its slots need {} beside the {} "
       "the non-expert weights, the KV cache and the overhead need{}",
       bytes_text(budget), parts, top_k,
       bytes_text(saturating_mul(p.slot_bytes_per_c, static_cast<uint64_t>(top_k))),
       bytes_text(fixed), kv_hint);
}

}  // namespace steermoe::engine
