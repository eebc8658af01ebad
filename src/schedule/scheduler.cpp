#include "schedule/scheduler.hpp"

#include <algorithm>

#include "common/error.hpp"

namespace steermoe::schedule {

namespace {

// Insertion sort of a few values (at most C); std::sort would do, but this keeps the hot path
// obviously allocation-free and the order fully determined.
template <typename T, typename Less>
void small_sort(std::span<T> values, Less less) {
  for (size_t i = 1; i < values.size(); ++i) {
    T v = values[i];
    size_t j = i;
    while (j > 0 && less(v, values[j - 1])) {
      values[j] = values[j - 1];
      --j;
    }
    values[j] = v;
  }
}

}  // namespace

TransferScheduler::TransferScheduler(const SchedulerConfig& config, link::Link& link)
    : config_(config), link_(&link) {
  if (config.layers < 1) fail("scheduler", "layers", "must be >= 1, got {}", config.layers);
  if (config.experts < 1) fail("scheduler", "experts", "must be >= 1, got {}", config.experts);
  if (config.slots < 1 || config.slots > config.experts)
    fail("scheduler", "slots", "must be in [1, experts={}], got {}", config.experts, config.slots);
  if (config.max_inflight < 1)
    fail("scheduler", "max_inflight", "must be >= 1, got {}", config.max_inflight);
  if (config.expert_bytes < 0)
    fail("scheduler", "expert_bytes", "must be >= 0, got {}", config.expert_bytes);
  const size_t slots = static_cast<size_t>(config.layers) * static_cast<size_t>(config.slots);
  const size_t experts = static_cast<size_t>(config.layers) * static_cast<size_t>(config.experts);
  logical_expert_.assign(slots, -1);
  generation_.assign(slots, 0);
  physical_expert_.assign(slots, -1);
  ticket_.assign(slots, link::kNoTicket);
  kind_.assign(slots, CopyKind::kNone);
  pending_.assign(slots, PendingNode{});
  issued_count_.assign(experts, 0);
  issued_mask_.assign(experts, 0);
  inflight_.assign(16, 0);
  records_.assign(slots, PrefetchRecord{});
  record_count_.assign(static_cast<size_t>(config.layers), 0);
  selected_flag_.assign(static_cast<size_t>(config.slots), 0);
  scratch_.assign(static_cast<size_t>(config.slots), 0);
  wait_tickets_.assign(static_cast<size_t>(config.slots), 0);
  reset_totals();
}

void TransferScheduler::reset_totals() {
  const auto layers = static_cast<size_t>(config_.layers);
  totals_ = RunTotals{};
  totals_.layer_demand.assign(layers, 0);
  totals_.layer_in_time.assign(layers, 0);
  totals_.layer_late.assign(layers, 0);
  totals_.layer_unused.assign(layers, 0);
  totals_.layer_stall.assign(layers, 0.0);
  totals_.layer_host.assign(layers, 0.0);
}

void TransferScheduler::set_physical(int slot_index, int expert) {
  const int layer = slot_index / config_.slots;
  const int old = physical_expert_[slot_index];
  if (old >= 0) {
    const size_t k = static_cast<size_t>(layer) * config_.experts + old;
    SM_ASSERT(issued_count_[k] > 0);
    if (--issued_count_[k] == 0) issued_mask_[k] = 0;
  }
  physical_expert_[slot_index] = expert;
  if (expert >= 0) {
    const size_t k = static_cast<size_t>(layer) * config_.experts + expert;
    ++issued_count_[k];
    issued_mask_[k] = 1;
  }
}

void TransferScheduler::enqueue_copy(int slot_index, CopyKind kind) {
  const int expert = logical_expert_[slot_index];
  SM_ASSERT(expert >= 0);
  set_physical(slot_index, expert);
  const link::CopyRequest request{.layer = slot_index / config_.slots,
                                  .slot = slot_index % config_.slots,
                                  .expert = expert,
                                  .bytes = config_.expert_bytes};
  const link::Ticket ticket = link_->enqueue(request);
  SM_ASSERT(ticket > ticket_[slot_index]);  // one FIFO queue: a later copy gets a later ticket
  ticket_[slot_index] = ticket;
  kind_[slot_index] = kind;
  if (kind == CopyKind::kPrefetch) {
    if (inflight_size_ == inflight_.size()) {
      std::vector<link::Ticket> bigger(inflight_.size() * 2);
      for (size_t i = 0; i < inflight_size_; ++i)
        bigger[i] = inflight_[(inflight_head_ + i) % inflight_.size()];
      inflight_.swap(bigger);
      inflight_head_ = 0;
    }
    inflight_[(inflight_head_ + inflight_size_) % inflight_.size()] = ticket;
    ++inflight_size_;
    ++token_.prefetch_enqueued;
  } else if (kind == CopyKind::kDemand) {
    ++token_.demand;
  }
  if (kind != CopyKind::kWarm && kind != CopyKind::kRestore) token_.bytes += config_.expert_bytes;
}

int TransferScheduler::unfinished_prefetches() {
  const link::Ticket done = link_->completed();
  while (inflight_size_ > 0 && inflight_[inflight_head_] <= done) {
    inflight_head_ = (inflight_head_ + 1) % inflight_.size();
    --inflight_size_;
  }
  return static_cast<int>(inflight_size_);
}

void TransferScheduler::pending_append(int slot_index, List list) {
  PendingNode& node = pending_[slot_index];
  SM_ASSERT(!node.live);
  const int64_t sequence = node.sequence > 0 ? node.sequence : ++pending_sequence_;
  node.live = true;
  node.list = list;
  node.sequence = sequence;
  node.prev = pending_tail_[list];
  node.next = -1;
  if (pending_tail_[list] >= 0) {
    pending_[pending_tail_[list]].next = slot_index;
  } else {
    pending_head_[list] = slot_index;
  }
  pending_tail_[list] = slot_index;
  ++pending_count_;
}

void TransferScheduler::pending_remove(int slot_index) {
  PendingNode& node = pending_[slot_index];
  SM_ASSERT(node.live);
  const List list = static_cast<List>(node.list);
  if (node.prev >= 0) {
    pending_[node.prev].next = node.next;
  } else {
    pending_head_[list] = node.next;
  }
  if (node.next >= 0) {
    pending_[node.next].prev = node.prev;
  } else {
    pending_tail_[list] = node.prev;
  }
  node = PendingNode{};
  --pending_count_;
}

void TransferScheduler::reassign(int slot_index, int expert) {
  SM_ASSERT(expert >= 0 && expert < config_.experts);
  if (pending_[slot_index].live) {
    // The slot now belongs to a newer insertion: the pending prefetch is stale and would be
    // dropped when it reached the queue, so drop it now.
    pending_remove(slot_index);
    ++token_.prefetch_dropped;
  }
  logical_expert_[slot_index] = expert;
  generation_[slot_index] = ++next_generation_;
}

double TransferScheduler::begin_request(std::span<const int32_t> slot_experts) {
  SM_ASSERT(slot_experts.size() == logical_expert_.size());
  SM_ASSERT(host_layer_ < 0);
  for (const List list : {kWaiting, kDeferred}) {
    while (pending_head_[list] >= 0) {
      pending_remove(pending_head_[list]);
      ++totals_.prefetch_dropped_reset;
    }
  }
  std::fill(record_count_.begin(), record_count_.end(), 0);
  token_ = TokenStats{};
  const double start = link_->now();
  link::Ticket last = link::kNoTicket;
  int64_t copies = 0;
  for (size_t g = 0; g < slot_experts.size(); ++g) {
    const int expert = slot_experts[g];
    SM_ASSERT(expert >= -1 && expert < config_.experts);
    logical_expert_[g] = expert;
    generation_[g] = ++next_generation_;
    if (expert >= 0 && physical_expert_[g] != expert) {
      enqueue_copy(static_cast<int>(g), CopyKind::kWarm);
      last = ticket_[g];
      ++copies;
    }
  }
  if (last != link::kNoTicket) link_->wait(last);
  const double seconds = link_->now() - start;
  totals_.warm_copies += copies;
  totals_.warm_bytes += copies * config_.expert_bytes;
  totals_.warm_seconds += seconds;
  ++totals_.requests;
  token_ = TokenStats{};
  return seconds;
}

void TransferScheduler::restore(std::span<const int32_t> slot_experts) {
  SM_ASSERT(slot_experts.size() == logical_expert_.size());
  SM_ASSERT(host_layer_ < 0);
  for (size_t g = 0; g < slot_experts.size(); ++g) {
    const int expert = slot_experts[g];
    if (expert < 0 || expert == logical_expert_[g]) continue;
    reassign(static_cast<int>(g), expert);
    if (physical_expert_[g] != expert) {
      enqueue_copy(static_cast<int>(g), CopyKind::kRestore);
      ++totals_.restore_copies;
    }
  }
}

void TransferScheduler::drop_pending() {
  SM_ASSERT(host_layer_ < 0);
  for (const List list : {kWaiting, kDeferred}) {
    while (pending_head_[list] >= 0) {
      pending_remove(pending_head_[list]);
      ++token_.prefetch_dropped;
    }
  }
}

bool TransferScheduler::place(int layer, int slot, int expert) {
  SM_ASSERT(host_layer_ < 0 && layer >= 0 && layer < config_.layers && slot >= 0 &&
            slot < config_.slots);
  const int g = index(layer, slot);
  if (logical_expert_[g] != expert) reassign(g, expert);
  if (physical_expert_[g] == expert) return false;
  enqueue_copy(g, CopyKind::kBlock);
  ++totals_.block_copies;
  return true;
}

void TransferScheduler::begin_token() {
  SM_ASSERT(host_layer_ < 0);
  token_ = TokenStats{};
  token_.start = link_->now();
  link_busy_at_start_ = link_->busy_seconds();
}

std::span<const uint8_t> TransferScheduler::begin_host(int layer) {
  SM_ASSERT(layer >= 0 && layer < config_.layers && host_layer_ < 0);
  host_layer_ = layer;
  host_begin_ = link_->now();
  return {issued_mask_.data() + static_cast<size_t>(layer) * config_.experts,
          static_cast<size_t>(config_.experts)};
}

void TransferScheduler::end_host(int layer, std::span<const int32_t> selected,
                                 std::span<const int32_t> selected_slot,
                                 std::span<const policy::Copy> demand,
                                 std::span<const policy::Copy> next_prefetch) {
  SM_ASSERT(layer == host_layer_);
  SM_ASSERT(selected.size() == selected_slot.size() && selected.size() <= selected_flag_.size());
  SM_ASSERT(next_prefetch.empty() || layer + 1 < config_.layers);
  host_layer_ = -1;
  const double host = link_->now() - host_begin_;
  token_.host += host;
  totals_.layer_host[layer] += host;

  // Demand insertions first update the logical mirror (they were decided in part 2, before the
  // enqueue sequence below starts; a demand can only reassign slots outside S).
  const size_t base = static_cast<size_t>(layer) * config_.slots;
  for (const policy::Copy& copy : demand) {
    SM_ASSERT(copy.slot >= 0 && copy.slot < config_.slots);
    reassign(static_cast<int>(base) + copy.slot, copy.expert);
  }
  for (size_t i = 0; i < selected.size(); ++i) {
    const int slot = selected_slot[i];
    SM_ASSERT(slot >= 0 && slot < config_.slots);
    SM_ASSERT_MSG(logical_expert_[base + slot] == selected[i],
                  "selected expert is not in the slot the insertions put it in");
    selected_flag_[slot] = 1;
  }

  // 1. Pending prefetches whose expert is in S go out at once, oldest first, whatever
  //    max_inflight says: the layer needs them now.
  int forced = 0;
  for (const int slot : selected_slot) {
    const int g = static_cast<int>(base) + slot;
    if (pending_[g].live) scratch_[forced++] = g;
  }
  small_sort(std::span<int32_t>(scratch_.data(), forced),
             [&](int32_t a, int32_t b) { return pending_[a].sequence < pending_[b].sequence; });
  for (int i = 0; i < forced; ++i) {
    pending_remove(scratch_[i]);
    enqueue_copy(scratch_[i], CopyKind::kPrefetch);
  }
  token_.prefetch_forced += forced;

  // 2. The demand copies of this layer, in emission order.
  for (const policy::Copy& copy : demand) {
    enqueue_copy(static_cast<int>(base) + copy.slot, CopyKind::kDemand);
  }

  // Classify this token's prefetches for this layer, as of the end of H(layer).
  const link::Ticket done = link_->completed();
  const size_t record_base = base;
  for (int i = 0; i < record_count_[layer]; ++i) {
    const PrefetchRecord& record = records_[record_base + i];
    const size_t g = base + record.slot;
    const bool used = generation_[g] == record.generation && selected_flag_[record.slot];
    if (!used) {
      ++token_.prefetch_unused;
      ++totals_.layer_unused[layer];
    } else if (ticket_[g] > done) {
      ++token_.prefetch_late;
      ++totals_.layer_late[layer];
    } else {
      ++token_.prefetch_in_time;
      ++totals_.layer_in_time[layer];
    }
  }
  if (config_.pacing != PrefetchPacing::kFifo) defer_unused(layer);
  record_count_[layer] = 0;
  totals_.layer_demand[layer] += static_cast<int64_t>(demand.size());
  for (const int slot : selected_slot) selected_flag_[slot] = 0;

  // 3. Part 1's prefetches for layer+1 join the pending list.
  if (!next_prefetch.empty()) {
    const int next = layer + 1;
    const size_t next_base = static_cast<size_t>(next) * config_.slots;
    SM_ASSERT(next_prefetch.size() <= static_cast<size_t>(config_.slots));
    for (const policy::Copy& copy : next_prefetch) {
      SM_ASSERT(copy.slot >= 0 && copy.slot < config_.slots);
      const int g = static_cast<int>(next_base) + copy.slot;
      reassign(g, copy.expert);
      pending_append(g, kWaiting);
      records_[next_base + record_count_[next]++] = {copy.slot, generation_[g]};
    }
    token_.prefetch_emitted += static_cast<int32_t>(next_prefetch.size());
  }

  // 4. The layer boundary.
  pump_pending();
}

void TransferScheduler::defer_unused(int layer) {
  // This token's prefetches for `layer` that S did not select and that are still waiting: no
  // copy is needed for them now (the policy may select them at a later token, and then they go
  // out at once as forced prefetches).
  const size_t base = static_cast<size_t>(layer) * config_.slots;
  for (int i = 0; i < record_count_[layer]; ++i) {
    const PrefetchRecord& record = records_[base + i];
    const int g = static_cast<int>(base) + record.slot;
    PendingNode& node = pending_[g];
    if (!node.live || node.list != kWaiting || generation_[g] != record.generation) continue;
    const int64_t sequence = node.sequence;
    pending_remove(g);
    pending_[g].sequence = sequence;  // keeps its place in arrival order
    pending_append(g, kDeferred);
    ++token_.prefetch_deferred;
  }
}

void TransferScheduler::pump_pending() {
  // Stale entries never reach here (reassign drops them), so every entry is a live copy.
  while (pending_head_[kWaiting] >= 0 && unfinished_prefetches() < config_.max_inflight) {
    const int g = pending_head_[kWaiting];
    pending_remove(g);
    enqueue_copy(g, CopyKind::kPrefetch);
  }
  // Deferred ones only when nothing else waits (pacing defer): a FIFO link would make every
  // later copy of this token wait behind them.
  if (config_.pacing != PrefetchPacing::kDefer || pending_head_[kWaiting] >= 0) return;
  while (pending_head_[kDeferred] >= 0 && unfinished_prefetches() < config_.max_inflight) {
    const int g = pending_head_[kDeferred];
    pending_remove(g);
    enqueue_copy(g, CopyKind::kPrefetch);
  }
}

double TransferScheduler::wait_for_layer(int layer, std::span<const int32_t> selected_slot) {
  SM_ASSERT(layer >= 0 && layer < config_.layers && host_layer_ < 0);
  const size_t base = static_cast<size_t>(layer) * config_.slots;
  const link::Ticket done = link_->completed();
  int waits = 0;
  for (const int slot : selected_slot) {
    const size_t g = base + slot;
    SM_ASSERT_MSG(!pending_[g].live, "a selected slot still has a pending prefetch");
    if (ticket_[g] > done) wait_tickets_[waits++] = ticket_[g];
  }
  if (waits == 0) {
    if (config_.issue == PrefetchIssue::kEarly) pump_pending();
    return 0.0;
  }
  small_sort(std::span<link::Ticket>(wait_tickets_.data(), waits),
             [](link::Ticket a, link::Ticket b) { return a < b; });
  const double start = link_->now();
  // Wait in ticket order and charge each increment to the kind of copy that caused it. Each
  // increment runs from the previous clock reading, so the parts add up to the whole stall (on
  // a wall clock the loop's own time between readings would otherwise fall between them).
  double before = start;
  for (int i = 0; i < waits; ++i) {
    link_->wait(wait_tickets_[i]);
    const double after = link_->now();
    const double waited = after - before;
    before = after;
    if (waited <= 0) continue;
    CopyKind kind = CopyKind::kNone;
    for (const int slot : selected_slot) {
      if (ticket_[base + slot] == wait_tickets_[i]) kind = kind_[base + slot];
    }
    switch (kind) {
      case CopyKind::kDemand:
      case CopyKind::kBlock:  // a verification block's demand
        token_.stall_on_demand += waited;
        break;
      case CopyKind::kPrefetch:
        token_.stall_on_prefetch += waited;
        break;
      default:
        token_.stall_on_other += waited;
        break;
    }
  }
  const double stall = before - start;
  if (config_.issue == PrefetchIssue::kEarly) pump_pending();
  token_.stall += stall;
  totals_.layer_stall[layer] += stall;
  return stall;
}

const TokenStats& TransferScheduler::end_token() {
  SM_ASSERT(host_layer_ < 0);
  token_.latency = link_->now() - token_.start;
  token_.link_busy = link_->busy_seconds() - link_busy_at_start_;
  ++totals_.tokens;
  totals_.latency += token_.latency;
  totals_.demand += token_.demand;
  totals_.prefetch_emitted += token_.prefetch_emitted;
  totals_.prefetch_enqueued += token_.prefetch_enqueued;
  totals_.prefetch_forced += token_.prefetch_forced;
  totals_.prefetch_in_time += token_.prefetch_in_time;
  totals_.prefetch_late += token_.prefetch_late;
  totals_.prefetch_unused += token_.prefetch_unused;
  totals_.prefetch_dropped += token_.prefetch_dropped;
  totals_.prefetch_deferred += token_.prefetch_deferred;
  totals_.stall += token_.stall;
  totals_.stall_on_demand += token_.stall_on_demand;
  totals_.stall_on_prefetch += token_.stall_on_prefetch;
  totals_.stall_on_other += token_.stall_on_other;
  totals_.host += token_.host;
  totals_.bytes += token_.bytes;
  totals_.link_busy += token_.link_busy;
  return token_;
}

}  // namespace steermoe::schedule
