// Measures the disk link on this machine before a benchmark or a profile: the link itself (the
// same reads, queue depth and O_DIRECT path the engine uses) copies experts of the model into a
// few scratch slots, so the figure is what `--link disk` can achieve here, not a separate
// reader's.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "model/weights.hpp"
#include "schedule/profile.hpp"

namespace steermoe::engine {

struct DiskProbe {
  double bytes_per_s = 0;     // copies back to back (the link's own queue depth)
  double copy_latency_s = 0;  // one copy alone, enqueue to completion (median of several)
  double pair_s = 0;          // two copies enqueued together, until both completed (median)
  int64_t expert_bytes = 0;   // bytes of one copy
  int copies = 0;             // copies timed for the bandwidth
  int warm_copies = 0;        // copies read, untimed, before them
  int walked = 0;             // copies read in all: a next probe's `first` reads other bytes
  std::string mode;           // "io_uring, O_DIRECT", ...
};

// The simulated link (SimulatedLinkParams: channels, latency, pipelined) that reproduces a
// probe's two facts: copies back to back reach `bytes_per_s`, and one copy alone takes
// `copy_latency_s`. A disk whose copy alone runs well below its back-to-back bandwidth reads
// several copies at once: channels = floor(bytes_per_s x alone / bytes) (at least 1, a little
// rounding allowed), each at bytes_per_s / channels; what is left of `alone` is latency.
struct FittedLink {
  int channels = 1;
  double latency_s = 0;
};
FittedLink fit_disk_link(double bytes_per_s, double copy_latency_s, int64_t expert_bytes);

// `profile` with its link replaced by the one `probe` measured (fit_disk_link; pipelined, as the
// disk link keeps several reads in flight; the probe's expert bytes); compute, host time and
// compute_slowdown kept. The one
// place a disk probe becomes a simulated link: `steermoe profile` writes it, `bench
// --probe-rounds` predicts each round with the link probed just before it.
schedule::HardwareProfile with_probed_link(schedule::HardwareProfile profile,
                                           const DiskProbe& probe);

// Times copies of distinct experts (spread over layers and experts, so no read hits what a
// previous one read) through a DiskLink: after `warm_bytes` read untimed, back to back until at
// least `copies` copies and `min_bytes` bytes (a long enough run to average a virtual disk's
// bursts), then a few alone and a few pairs, the link warm. `first`: where the walk over
// distinct experts starts (probes taken one after another read other bytes than the last, which
// a virtual disk's host may still cache). Throws steermoe::Error when the model's experts are not
// stored as-is in its file(s).
DiskProbe probe_disk_link(const model::Model& model, int copies = 64,
                          int64_t min_bytes = int64_t{1} << 30, int first = 0,
                          int64_t warm_bytes = 0);

// While alive, a thread of its own keeps the disk link reading distinct experts of `model`, one
// copy after another (as prefetches run beside compute): what `steermoe profile` times compute
// beside, to measure how much slower compute runs while the link transfers on this machine, and
// how much slower the link reads while compute runs (the same reads timed alone, ReadRate).
class BackgroundReads {
 public:
  // `first`: where the walk over distinct experts starts (as probe_disk_link's).
  explicit BackgroundReads(const model::Model& model, int first = 0);
  ~BackgroundReads();  // stops after the copy in flight and joins
  BackgroundReads(const BackgroundReads&) = delete;
  BackgroundReads& operator=(const BackgroundReads&) = delete;
  int64_t bytes_read() const { return bytes_.load(std::memory_order_relaxed); }
  // Stops after the copy in flight and joins (idempotent): the reads' bytes and the seconds from
  // the first read's enqueue to the last one's completion, and how many copies were read.
  struct Done {
    int64_t bytes = 0;
    double seconds = 0;
    int copies = 0;
  };
  Done stop();
  // The same figures so far, the reads going on (seconds: to the last completion).
  Done sample() const;

 private:
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> bytes_{0};
  std::atomic<int> copies_{0};
  std::atomic<double> seconds_{0};
  std::thread thread_;
};

// Bytes per second of BackgroundReads over `seconds` with nothing else running in this process:
// the rate the same reads reach beside compute is compared with.
BackgroundReads::Done reads_alone(const model::Model& model, double seconds, int first = 0);

}  // namespace steermoe::engine
