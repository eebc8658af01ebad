// The interface through which the transfer scheduler issues expert copies and learns when they
// have completed. One Link is one ordered copy queue (like one CUDA stream): copies complete in
// the order they were enqueued, so "everything up to ticket t has completed" is the only
// completion fact the scheduler needs. Implementations: the simulated clock (this part), and
// later an emulated link (memcpy thread at a set bandwidth), a disk link (pread / O_DIRECT /
// io_uring into RAM slots) and a CUDA copy stream with events. The scheduler never learns which.
#pragma once

#include <cstdint>

namespace steermoe::link {

// Tickets number the copies of one link from 1 in enqueue order; 0 means "no copy" (a slot that
// was never written by this link, which every completion query treats as complete).
using Ticket = int64_t;
inline constexpr Ticket kNoTicket = 0;

// One copy: expert `expert` of MoE layer `layer` into cache slot `slot` of that layer. The link
// maps (layer, expert) to its source bytes and (layer, slot) to the destination; `bytes` is the
// size it moves (a simulated link needs nothing else).
struct CopyRequest {
  int32_t layer = 0;
  int32_t slot = 0;
  int32_t expert = 0;
  int64_t bytes = 0;
};

class Link {
 public:
  virtual ~Link() = default;

  // Appends a copy to the queue and returns its ticket (the previous ticket + 1). Never blocks
  // on the copy itself.
  virtual Ticket enqueue(const CopyRequest& copy) = 0;

  // The highest ticket t such that every copy with a ticket <= t has completed as of now().
  virtual Ticket completed() = 0;

  // Returns once completed() >= ticket (blocking the caller, or advancing a simulated clock).
  virtual void wait(Ticket ticket) = 0;

  // The link's clock in seconds (monotonic; the origin is the link's own). The scheduler takes
  // every time it reports (host time, stalls, token latency) from this clock, so a simulated
  // link yields simulated times and a real one wall-clock times.
  virtual double now() = 0;

  bool is_complete(Ticket ticket) { return ticket <= completed(); }

  // Seconds of the link's clock during which at least one copy was in flight (enqueued, not yet
  // complete), over the link's lifetime; 0 where the link does not measure it. Bytes moved
  // divided by it is the rate the link reached under its caller's own pattern of copies.
  virtual double busy_seconds() { return 0.0; }
};

}  // namespace steermoe::link
