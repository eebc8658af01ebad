#include "link/emulated_link.hpp"

#include <charconv>
#include <chrono>
#include <cmath>
#include <cstring>
#include <string>

#include "common/error.hpp"

namespace steermoe::link {
namespace {

using Clock = std::chrono::steady_clock;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

EmulatedLink::EmulatedLink(const ExpertLayout& layout, SlotArena& arena,
                           const EmulatedLinkParams& params)
    : layout_(layout), arena_(arena), params_(params), start_ns_(now_ns()) {
  if (!(params.bandwidth_bytes_per_s > 0))
    fail("emulated link", "bandwidth", "must be > 0 bytes/s, got {}", params.bandwidth_bytes_per_s);
  if (!(params.latency_s >= 0))
    fail("emulated link", "latency", "must be >= 0 s, got {}", params.latency_s);
  if (!(params.extra_delay_max_s >= 0) || !(params.spin_s >= 0))
    fail("emulated link", "delay", "spin and extra delay must be >= 0");
  SM_ASSERT_MSG(layout.complete(), "expert layout incomplete");
  if (!layout.in_memory())
    fail("emulated link", "source", "every expert needs a host memory copy (none for some part)");
  if (arena.layers() != layout.layers() || arena.slot_bytes() < layout.slot_bytes()) {
    fail("emulated link", "slots",
         "expected {} layers of slots of >= {} bytes, found {} layers of {} bytes", layout.layers(),
         layout.slot_bytes(), arena.layers(), arena.slot_bytes());
  }
  thread_ = std::thread([this] { run(); });
}

EmulatedLink::~EmulatedLink() {
  stopping_.store(true, std::memory_order_release);
  queue_.close();
  thread_.join();
}

double EmulatedLink::seconds_since_start() const {
  return static_cast<double>(now_ns() - start_ns_) * 1e-9;
}

double EmulatedLink::now() {
  return seconds_since_start();
}

Ticket EmulatedLink::enqueue(const CopyRequest& copy) {
  SM_ASSERT(copy.layer >= 0 && copy.layer < layout_.layers() && copy.expert >= 0 &&
            copy.expert < layout_.experts() && copy.slot >= 0 &&
            copy.slot < arena_.slots_per_layer() && copy.bytes >= 0);
  if (done_.failed()) done_.completed();  // rethrows
  return queue_.push(copy, seconds_since_start());
}

void EmulatedLink::run() {
  // Copies whose bytes are in their slot but whose nominal end has not come yet. The thread
  // copies ahead (the next copies' memcpy overlaps the wait for the earlier ones' end, as a DMA
  // engine's transfers overlap), so the achieved rate is set by the timing model until the
  // memcpy itself is the bottleneck; a copy into a slot that an unfinished copy is writing waits.
  struct Pending {
    Ticket ticket;
    double end;
    int64_t bytes;
    int32_t layer, slot;
  };
  constexpr size_t kAhead = 8;
  constexpr size_t kChunk = size_t{1} << 20;
  Pending pending[kAhead];
  size_t head = 0, count = 0;
  uint64_t rng = params_.delay_seed;
  double last_end = 0;
  auto publish_due = [&] {
    const double now = seconds_since_start();
    const bool stop = stopping_.load(std::memory_order_acquire);
    Ticket t = kNoTicket;
    int64_t bytes = 0;
    while (count > 0 && (pending[head].end <= now || stop)) {
      t = pending[head].ticket;
      bytes += pending[head].bytes;
      head = (head + 1) % kAhead;
      --count;
    }
    if (t != kNoTicket) {
      bytes_moved_.fetch_add(bytes, std::memory_order_release);
      done_.publish(t);
    }
  };
  auto slot_pending = [&](const CopyRequest& c) {
    for (size_t i = 0; i < count; ++i) {
      const Pending& p = pending[(head + i) % kAhead];
      if (p.layer == c.layer && p.slot == c.slot) return true;
    }
    return false;
  };
  auto wait_for_head = [&] {
    const double end = pending[head].end;
    if (!stopping_.load(std::memory_order_acquire)) {
      const double left = end - seconds_since_start();
      if (left > params_.spin_s)
        std::this_thread::sleep_for(std::chrono::duration<double>(left - params_.spin_s));
      while (seconds_since_start() < end && !stopping_.load(std::memory_order_acquire))
        std::this_thread::yield();
    }
    publish_due();
  };
  QueuedCopy q;
  bool have = false;  // q holds a popped copy not yet started
  for (;;) {
    publish_due();
    if (!have) {
      if (count == 0) {
        if (!queue_.pop(q, true)) break;  // closed and drained
        have = true;
      } else if (count < kAhead) {
        const double until = pending[head].end - params_.spin_s;
        const auto deadline = Clock::time_point(
            std::chrono::nanoseconds(start_ns_ + static_cast<int64_t>(until * 1e9)));
        have = queue_.pop_until(q, deadline);
      }
    }
    if (!have || slot_pending(q.copy)) {
      if (count > 0) wait_for_head();
      continue;
    }
    have = false;
    const int64_t t0 = now_ns();
    std::byte* slot = arena_.slot(q.copy.layer, q.copy.slot);
    int64_t bytes = 0;
    for (const ExpertPart& p : layout_.parts(q.copy.layer, q.copy.expert)) {
      for (size_t done = 0; done < p.bytes; done += kChunk) {
        const size_t n = std::min<size_t>(kChunk, static_cast<size_t>(p.bytes) - done);
        std::memcpy(slot + p.slot_offset + done, p.source + done, n);
        publish_due();  // earlier copies end on time while this one is copied
      }
      bytes += static_cast<int64_t>(p.bytes);
    }
    const int64_t t1 = now_ns();
    memcpy_ns_.fetch_add(t1 - t0, std::memory_order_relaxed);
    const double memcpy_end = static_cast<double>(t1 - start_ns_) * 1e-9;
    const int64_t timed_bytes = q.copy.bytes > 0 ? q.copy.bytes : bytes;
    double duration =
        params_.latency_s + static_cast<double>(timed_bytes) / params_.bandwidth_bytes_per_s;
    if (params_.extra_delay_max_s > 0) {
      duration +=
          static_cast<double>(splitmix64(rng) >> 11) * 0x1.0p-53 * params_.extra_delay_max_s;
    }
    // Rule 4: the copy starts at the later of its enqueue and the previous copy's end. It ends
    // at its nominal time, or when its memcpy did if the host RAM was slower than the requested
    // bandwidth; a late wake-up of this thread does not delay the next copy.
    const double end = std::max(std::max(q.enqueued, last_end) + duration, memcpy_end);
    last_end = end;
    pending[(head + count) % kAhead] = {q.ticket, end, bytes, q.copy.layer, q.copy.slot};
    ++count;
  }
}

}  // namespace steermoe::link
