// Measures the disk link on this machine before a benchmark or a profile: the link itself (the
// same reads, queue depth and O_DIRECT path the engine uses) copies experts of the model into a
// few scratch slots, so the figure is what `--link disk` can achieve here, not a separate
// reader's.
#pragma once

#include <cstdint>
#include <string>

#include "model/weights.hpp"

namespace steermoe::engine {

struct DiskProbe {
  double bytes_per_s = 0;     // copies back to back (the link's own queue depth)
  double copy_latency_s = 0;  // one copy alone, enqueue to completion (median of several)
  int64_t expert_bytes = 0;   // bytes of one copy
  int copies = 0;             // copies timed for the bandwidth
  std::string mode;           // "io_uring, O_DIRECT", ...
};

// Copies `copies` distinct experts (spread over layers and experts, so no read hits what a
// previous one cached) through a DiskLink. Throws steermoe::Error when the model's experts are
// not stored as-is in its file(s).
DiskProbe probe_disk_link(const model::Model& model, int copies = 64);

}  // namespace steermoe::engine
