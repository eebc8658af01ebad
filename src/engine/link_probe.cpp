#include "engine/link_probe.hpp"

#include <algorithm>
#include <utility>
#include <vector>

#include "common/error.hpp"
#include "link/disk_link.hpp"
#include "model/expert_ranges.hpp"

namespace steermoe::engine {

namespace {
// The i-th read of a walk over distinct experts: expert (i / L) of layer i % L, so no two reads
// of one walk (up to L x experts of them) read the same bytes and a layer recurs only L reads on.
std::pair<int, int> nth_distinct_expert(const link::ExpertLayout& layout, int i) {
  const int layers = layout.layers();
  return {i % layers, (i / layers) % layout.experts()};
}
}  // namespace

DiskProbe probe_disk_link(const model::Model& model, int copies) {
  const link::ExpertLayout layout = model::expert_layout(model);
  if (layout.layers() == 0) fail(model.path().string(), "experts", "expected a MoE model to probe");
  if (!layout.on_disk())
    fail(model.path().string(), "experts",
         "expected every expert stored as-is in the file to probe the disk link");
  // One slot per MoE layer: copy i reads expert (i / L) of layer i % L, so no two copies read
  // the same bytes, and a slot is reused only L copies later (waited for if still in flight).
  const int layers = layout.layers();
  link::SlotArena arena(layers, 1, layout.slot_bytes());
  link::DiskLink disk(layout, arena, {});
  std::vector<link::Ticket> in_slot(static_cast<size_t>(layers), link::kNoTicket);
  int i = 0;
  auto copy = [&] {
    const auto [layer, expert] = nth_distinct_expert(layout, i++);
    disk.wait(in_slot[static_cast<size_t>(layer)]);
    const link::Ticket t = disk.enqueue({.layer = layer, .slot = 0, .expert = expert, .bytes = 0});
    in_slot[static_cast<size_t>(layer)] = t;
    return t;
  };
  DiskProbe probe;
  probe.mode = disk.mode();
  probe.expert_bytes = static_cast<int64_t>(layout.expert_bytes(0, 0));
  std::vector<double> alone;
  for (int k = 0; k < 5; ++k) {
    const double t0 = disk.now();
    disk.wait(copy());
    alone.push_back(disk.now() - t0);
  }
  std::sort(alone.begin(), alone.end());
  probe.copy_latency_s = alone[alone.size() / 2];
  const int64_t before = disk.bytes_read();
  const double t0 = disk.now();
  link::Ticket last = link::kNoTicket;
  for (int k = 0; k < copies; ++k) last = copy();
  disk.wait(last);
  const double seconds = disk.now() - t0;
  probe.copies = copies;
  probe.bytes_per_s = seconds > 0 ? static_cast<double>(disk.bytes_read() - before) / seconds : 0.0;
  return probe;
}

BackgroundReads::BackgroundReads(const model::Model& model) {
  const link::ExpertLayout layout = model::expert_layout(model);
  if (layout.layers() == 0 || !layout.on_disk())
    fail(model.path().string(), "experts",
         "expected every expert stored as-is in the file to read beside compute");
  thread_ = std::thread([this, layout] {
    link::SlotArena arena(layout.layers(), 1, layout.slot_bytes());
    link::DiskLink disk(layout, arena, {});
    for (int i = 0; !stop_.load(std::memory_order_relaxed); ++i) {
      const auto [layer, expert] = nth_distinct_expert(layout, i);
      disk.wait(disk.enqueue({.layer = layer, .slot = 0, .expert = expert, .bytes = 0}));
      bytes_.fetch_add(static_cast<int64_t>(layout.expert_bytes(layer, expert)),
                       std::memory_order_relaxed);
    }
  });
}

BackgroundReads::~BackgroundReads() {
  stop_.store(true, std::memory_order_relaxed);
  thread_.join();
}

}  // namespace steermoe::engine
