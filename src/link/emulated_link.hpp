// A link that moves real bytes at a set speed: experts are copied from their host memory source
// (ExpertPart::source, e.g. the mapped model file) into cache slots by a copy thread, and each
// copy is reported complete only when the timing model's rule 4 says it would be
// (docs/policy-contract.md, "Timing model"): it starts at the later of its enqueue time and the
// end of the previous copy and takes latency + bytes / bandwidth. This emulates a PCIe link on a
// CPU machine and lets a measured run be compared with the simulator event for event. The thread
// copies ahead (the memcpy of later copies overlaps the wait for earlier ones' end), so the
// achieved bandwidth is the requested one until the host's memcpy bandwidth is the limit; then
// copies end when their memcpy does.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <thread>

#include "link/copy_queue.hpp"
#include "link/expert_layout.hpp"
#include "link/link.hpp"
#include "link/link_spec.hpp"
#include "link/slot_arena.hpp"

namespace steermoe::link {

class EmulatedLink final : public Link {
 public:
  // `layout` and `arena` must outlive the link; every part needs a host source and the arena's
  // slots must hold layout.slot_bytes(). Starts the copy thread.
  EmulatedLink(const ExpertLayout& layout, SlotArena& arena, const EmulatedLinkParams& params);
  ~EmulatedLink() override;  // finishes queued copies' memcpy (without waiting out their time)
  EmulatedLink(const EmulatedLink&) = delete;
  EmulatedLink& operator=(const EmulatedLink&) = delete;

  // The timing uses copy.bytes (the scheduler's figure, as the simulator does), or the layout's
  // expert bytes when copy.bytes is 0.
  Ticket enqueue(const CopyRequest& copy) override;
  Ticket completed() override { return done_.completed(); }
  void wait(Ticket ticket) override { done_.wait(ticket); }
  double now() override;

  const EmulatedLinkParams& params() const { return params_; }
  // Bytes copied and copies finished so far (read by the caller after wait()).
  int64_t bytes_moved() const { return bytes_moved_.load(std::memory_order_acquire); }
  // Seconds the copy thread's memcpy took in total (to tell whether the host RAM could keep up
  // with the requested bandwidth).
  double memcpy_seconds() const { return memcpy_ns_.load(std::memory_order_acquire) * 1e-9; }

 private:
  void run();
  double seconds_since_start() const;

  const ExpertLayout& layout_;
  SlotArena& arena_;
  EmulatedLinkParams params_;
  int64_t start_ns_ = 0;
  CopyQueue queue_;
  Completion done_;
  std::atomic<int64_t> bytes_moved_{0};
  std::atomic<int64_t> memcpy_ns_{0};
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace steermoe::link
