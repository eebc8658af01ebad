#include "engine/cache_stats.hpp"

namespace steermoe::engine {

namespace {

// One list of the fields, so that += and -= cannot drift apart.
template <typename Op>
void each_field(CacheStats& a, const CacheStats& b, Op op) {
  op(a.routed_tokens, b.routed_tokens);
  op(a.layer_steps, b.layer_steps);
  op(a.replaced, b.replaced);
  op(a.logical_demand, b.logical_demand);
  op(a.logical_prefetch, b.logical_prefetch);
  op(a.block_positions, b.block_positions);
  op(a.block_copies, b.block_copies);
  op(a.restore_copies, b.restore_copies);
  op(a.block_copied, b.block_copied);
  op(a.block_prefetched, b.block_prefetched);
  op(a.tokens, b.tokens);
  op(a.latency_s, b.latency_s);
  op(a.demand, b.demand);
  op(a.prefetch_emitted, b.prefetch_emitted);
  op(a.prefetch, b.prefetch);
  op(a.prefetch_in_time, b.prefetch_in_time);
  op(a.prefetch_late, b.prefetch_late);
  op(a.prefetch_unused, b.prefetch_unused);
  op(a.prefetch_dropped, b.prefetch_dropped);
  op(a.stall_s, b.stall_s);
  op(a.stall_demand_s, b.stall_demand_s);
  op(a.stall_prefetch_s, b.stall_prefetch_s);
  op(a.stall_other_s, b.stall_other_s);
  op(a.host_s, b.host_s);
  op(a.attention_s, b.attention_s);
  op(a.moe_s, b.moe_s);
  op(a.bytes, b.bytes);
  op(a.link_busy_s, b.link_busy_s);
  op(a.warm_copies, b.warm_copies);
  op(a.restore_copied, b.restore_copied);
  op(a.warm_bytes, b.warm_bytes);
  op(a.warm_s, b.warm_s);
  a.physical = a.physical || b.physical;
}

}  // namespace

CacheStats& CacheStats::operator+=(const CacheStats& o) {
  each_field(*this, o, [](auto& x, const auto& y) { x += y; });
  return *this;
}

CacheStats& CacheStats::operator-=(const CacheStats& o) {
  each_field(*this, o, [](auto& x, const auto& y) { x -= y; });
  return *this;
}

}  // namespace steermoe::engine
