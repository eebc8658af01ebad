// A discrete-event model of one copy link, driven by a simulated clock. A copy starts at the
// later of its enqueue time and the end of the previous copy (one FIFO stream) and takes
// `latency + bytes / bandwidth` (docs/policy-contract.md "Timing model" 4). A link of several
// channels (a disk that reads faster with more reads in flight) starts each copy on the channel
// that frees first; completion is still reported in enqueue order (a copy counts as complete
// once it and every earlier copy have ended), as the real links report it. Because channels are
// taken in order and durations are known at enqueue, each copy's completion time is fixed when
// it is enqueued, until the caller's work slows the link (transfer_slowdown): then advance()
// re-times the copies in flight as events (each channel's transfer progressing at the slowed
// rate while the work runs, the work at the slowed rate while a channel is busy), leaving every
// completion time the projection at full speed from the work's end. The clock moves only
// through advance() (compute or host work of the caller) and wait() (a stall). Nothing allocates in
// steady state: in-flight copies live in a ring that only grows when more copies are in flight than
// ever before (the warm-up at request start).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "link/link.hpp"

namespace steermoe::link {

struct SimulatedLinkParams {
  double bandwidth_bytes_per_s = 0;  // sustained copy bandwidth (> 0)
  double latency_s = 0;              // fixed cost of every copy (>= 0)
  // false: one copy after another, each paying latency + bytes / bandwidth (a GPU copy stream).
  // true: copies in flight overlap their latency and share the bandwidth one transfer after
  // another (a disk with a queue of reads): a copy ends at max(enqueue + latency + transfer,
  // previous end + transfer).
  bool pipelined = false;
  // Copies that transfer at once, each at bandwidth / channels (so `bandwidth` is what the link
  // reaches with every channel busy, and one copy alone takes latency + bytes * channels /
  // bandwidth): a disk whose reads are faster together than one after another. 1: one stream.
  // With `pipelined`, each channel overlaps its copies' latency as above.
  int channels = 1;
  // Fraction of the caller's speed lost while a copy transfers, in [0, 1): on a CPU whose cores
  // also serve the link (a virtual disk's I/O, the memory bus a DMA shares), work advanced while
  // a transfer is under way takes 1 / (1 - compute_slowdown) as long. 0 (a GPU's copy engine):
  // advance() is plain addition.
  double compute_slowdown = 0;
  // Fraction of the link's transfer speed lost while the caller works (advance()), in [0, 1):
  // the converse of compute_slowdown, on a CPU whose cores serve both (a disk link's I/O thread
  // waits for a core while compute threads hold them). 0: a transfer's times are fixed when it
  // is enqueued. > 0: advance() re-times the transfers it overlaps (their bytes progress at
  // 1 - transfer_slowdown of the speed meanwhile); latency and wait() (the caller idle) run at
  // full speed.
  double transfer_slowdown = 0;
};

// Start and end of one simulated copy, kept only when the log is enabled (tests, traces).
struct CopyEvent {
  Ticket ticket = kNoTicket;
  CopyRequest copy;
  double enqueued = 0;
  double start = 0;         // the transfer starts (after the latency unless pipelined)
  double transfer_end = 0;  // its channel is done with it
  double end = 0;           // the link reports it complete (it and every earlier copy ended)
  int channel = 0;
};

class SimulatedLink final : public Link {
 public:
  explicit SimulatedLink(const SimulatedLinkParams& params);

  Ticket enqueue(const CopyRequest& copy) override;
  Ticket completed() override;
  void wait(Ticket ticket) override;
  double now() override { return now_; }

  // Simulated work of the caller (compute, host policy) lets `seconds` pass, or more where
  // compute_slowdown > 0 and copies transfer meanwhile; with transfer_slowdown > 0 the copies in
  // flight transfer slower meanwhile. Exact (events), not sampled.
  void advance(double seconds);
  // Completion time of an in-flight (or just-enqueued) copy if the caller does no more work
  // before it (exact then; work with transfer_slowdown > 0 moves it later); the ticket must not
  // have been retired yet (i.e. > completed() at the last query) unless the log is on.
  double completion_time(Ticket ticket) const;
  // Time at which the link will have finished every copy enqueued so far (at full speed from
  // now: as completion_time()).
  double busy_until() const { return last_end_; }
  int channels() const { return params_.channels; }
  Ticket last_ticket() const { return last_ticket_; }
  // Bytes moved over the link's lifetime, and the seconds during which some channel was
  // transferring (the union: with several channels, overlapping transfers count once).
  int64_t bytes_moved() const { return bytes_moved_; }
  double busy_seconds() override { return busy_seconds_; }

  // Keeps every copy's times in log() (allocates; for tests and traces only).
  void enable_log(bool on) { log_enabled_ = on; }
  const std::vector<CopyEvent>& log() const { return log_; }

  double copy_seconds(int64_t bytes) const;

 private:
  void retire();
  void grow_rings();
  // advance() where the work and the link slow each other: events from now_.
  void advance_with_events(double seconds);

  SimulatedLinkParams params_;
  double now_ = 0;
  double last_end_ = 0;  // latest completion so far (the FIFO watermark's time)
  // When each channel finishes the last copy given to it (`channels` entries).
  std::vector<double> channel_free_;
  Ticket last_ticket_ = kNoTicket;
  Ticket completed_ = kNoTicket;
  int64_t bytes_moved_ = 0;
  double busy_seconds_ = 0;
  // Ring of completion times (in enqueue order) of tickets completed_+1 .. last_ticket_
  // (capacity a power of two), and beside it when each one's transfer starts and ends (its
  // channel is busy from there to there; these intervals start in ticket order).
  std::vector<double> ring_;
  std::vector<double> transfer_start_;
  std::vector<double> transfer_end_;
  // Beside them, what re-timing needs: when each copy was enqueued, its transfer's seconds on a
  // channel at full speed, and its channel.
  std::vector<double> enqueued_;
  std::vector<double> transfer_s_;
  std::vector<int> channel_;
  std::size_t head_ = 0;    // ring index of ticket completed_ + 1
  double retired_end_ = 0;  // completion time of ticket completed_ (0: none yet)
  // advance_with_events' per-channel state (sized once: no allocation while advancing).
  struct ChannelState {
    std::size_t copy = 0;  // ring offset from head_ of the copy it holds
    bool busy = false;
    double latency_end = 0;  // its latency on the channel ends (not pipelined)
    double left = 0;         // transfer seconds at full speed still to go
  };
  std::vector<ChannelState> channel_state_;
  bool log_enabled_ = false;
  std::vector<CopyEvent> log_;
};

}  // namespace steermoe::link
