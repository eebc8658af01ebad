#include "engine/link_probe.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
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

FittedLink fit_disk_link(double bytes_per_s, double copy_latency_s, int64_t expert_bytes) {
  FittedLink fit;
  if (!(bytes_per_s > 0) || expert_bytes <= 0) return fit;
  const double one_at_full_speed = static_cast<double>(expert_bytes) / bytes_per_s;
  // 5% of rounding allowed (a probe's noise): 1.96 channels' worth is 2 channels, not 1.
  fit.channels =
      std::clamp(static_cast<int>(std::floor(copy_latency_s / one_at_full_speed + 0.05)), 1, 64);
  fit.latency_s = std::max(0.0, copy_latency_s - fit.channels * one_at_full_speed);
  return fit;
}

schedule::HardwareProfile with_probed_link(schedule::HardwareProfile profile,
                                           const DiskProbe& probe) {
  const FittedLink fit = fit_disk_link(probe.bytes_per_s, probe.copy_latency_s, probe.expert_bytes);
  profile.link_bandwidth_bytes_per_s = probe.bytes_per_s;
  profile.link_latency_s = fit.latency_s;
  profile.link_channels = fit.channels;
  profile.link_pipelined = true;
  profile.expert_bytes = probe.expert_bytes;  // what the probe's copies moved
  return profile;
}

DiskProbe probe_disk_link(const model::Model& model, int copies, int64_t min_bytes, int first,
                          int64_t warm_bytes) {
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
  const int64_t distinct = static_cast<int64_t>(layers) * layout.experts();
  int i = static_cast<int>(std::max<int64_t>(first, 0) % distinct);
  auto copy = [&] {
    const auto [layer, expert] = nth_distinct_expert(layout, i++);
    disk.wait(in_slot[static_cast<size_t>(layer)]);
    const link::Ticket t = disk.enqueue({.layer = layer, .slot = 0, .expert = expert, .bytes = 0});
    in_slot[static_cast<size_t>(layer)] = t;
    return t;
  };
  const auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  DiskProbe probe;
  probe.mode = disk.mode();
  probe.expert_bytes = static_cast<int64_t>(layout.expert_bytes(0, 0));
  // Back to back (after the untimed warm reads) before the copies alone and in pairs: at least
  // `copies`, and none of the timed ones rereads another timed one. First, because a copy alone
  // right after the disk sat idle can take several times what it takes once reads flow (measured on
  // a Firecracker guest's virtual disk after a round that read nothing: 13-18 ms alone
  // against 2.4-3.5 ms, at the same back-to-back rate), and the engine's copies come while reads
  // flow.
  constexpr int kAlone = 7, kPairs = 5;
  const int64_t per_copy = std::max<int64_t>(probe.expert_bytes, 1);
  const int64_t wanted = std::max<int64_t>(copies, (min_bytes + per_copy - 1) / per_copy);
  const auto timed =
      static_cast<int>(std::max<int64_t>(copies, std::min(wanted, distinct - kAlone - 2 * kPairs)));
  link::Ticket last = link::kNoTicket;
  probe.warm_copies = static_cast<int>(
      std::min<int64_t>((std::max<int64_t>(warm_bytes, 0) + per_copy - 1) / per_copy, distinct));
  for (int k = 0; k < probe.warm_copies; ++k) last = copy();
  disk.wait(last);
  const int64_t before = disk.bytes_read();
  const double t0 = disk.now();
  for (int k = 0; k < timed; ++k) last = copy();
  disk.wait(last);
  const double seconds = disk.now() - t0;
  probe.copies = timed;
  probe.bytes_per_s = seconds > 0 ? static_cast<double>(disk.bytes_read() - before) / seconds : 0.0;
  std::vector<double> alone, pair;
  for (int k = 0; k < kAlone; ++k) {
    const double a0 = disk.now();
    disk.wait(copy());
    alone.push_back(disk.now() - a0);
  }
  probe.copy_latency_s = median(alone);
  if (layers >= 2) {  // two slots, so the pair's copies never wait for each other
    for (int k = 0; k < kPairs; ++k) {
      const double p0 = disk.now();
      copy();
      disk.wait(copy());
      pair.push_back(disk.now() - p0);
    }
    probe.pair_s = median(pair);
  }
  probe.walked = i - static_cast<int>(std::max<int64_t>(first, 0) % distinct);
  return probe;
}

BackgroundReads::BackgroundReads(const model::Model& model, int first) {
  const link::ExpertLayout layout = model::expert_layout(model);
  if (layout.layers() == 0 || !layout.on_disk())
    fail(model.path().string(), "experts",
         "expected every expert stored as-is in the file to read beside compute");
  thread_ = std::thread([this, layout, first = std::max(first, 0)] {
    link::SlotArena arena(layout.layers(), 1, layout.slot_bytes());
    link::DiskLink disk(layout, arena, {});
    const double start = disk.now();
    for (int i = first; !stop_.load(std::memory_order_relaxed); ++i) {
      const auto [layer, expert] = nth_distinct_expert(layout, i);
      disk.wait(disk.enqueue({.layer = layer, .slot = 0, .expert = expert, .bytes = 0}));
      const double done = disk.now() - start;
      bytes_.fetch_add(static_cast<int64_t>(layout.expert_bytes(layer, expert)),
                       std::memory_order_release);
      copies_.fetch_add(1, std::memory_order_release);
      seconds_.store(done, std::memory_order_release);
    }
  });
}

BackgroundReads::Done BackgroundReads::stop() {
  stop_.store(true, std::memory_order_relaxed);
  if (thread_.joinable()) thread_.join();
  return {.bytes = bytes_.load(std::memory_order_relaxed),
          .seconds = seconds_.load(std::memory_order_relaxed),
          .copies = copies_.load(std::memory_order_relaxed)};
}

BackgroundReads::Done BackgroundReads::sample() const {
  // Seconds first: a completion between the two loads then counts its bytes but not its time
  // only until the next sample, never the reverse.
  const double seconds = seconds_.load(std::memory_order_acquire);
  return {.bytes = bytes_.load(std::memory_order_acquire),
          .seconds = seconds,
          .copies = copies_.load(std::memory_order_acquire)};
}

BackgroundReads::~BackgroundReads() {
  stop();
}

BackgroundReads::Done reads_alone(const model::Model& model, double seconds, int first) {
  BackgroundReads reads(model, first);
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  return reads.stop();
}

}  // namespace steermoe::engine
