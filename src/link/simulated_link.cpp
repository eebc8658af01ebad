#include "link/simulated_link.hpp"

#include <algorithm>

#include "common/error.hpp"

namespace steermoe::link {

SimulatedLink::SimulatedLink(const SimulatedLinkParams& params)
    : params_(params), ring_(64), transfer_start_(64) {
  if (!(params.bandwidth_bytes_per_s > 0))
    fail("simulated link", "bandwidth", "must be > 0 bytes/s, got {}",
         params.bandwidth_bytes_per_s);
  if (!(params.latency_s >= 0))
    fail("simulated link", "latency", "must be >= 0 s, got {}", params.latency_s);
  if (!(params.compute_slowdown >= 0 && params.compute_slowdown < 1))
    fail("simulated link", "compute slowdown", "must be in [0, 1), got {}",
         params.compute_slowdown);
}

double SimulatedLink::copy_seconds(int64_t bytes) const {
  return params_.latency_s + static_cast<double>(bytes) / params_.bandwidth_bytes_per_s;
}

Ticket SimulatedLink::enqueue(const CopyRequest& copy) {
  SM_ASSERT(copy.bytes >= 0);
  const size_t in_flight = static_cast<size_t>(last_ticket_ - completed_);
  if (in_flight == ring_.size()) {
    // Grow the ring, unrolling it so that head_ becomes 0 (only happens at new peaks).
    std::vector<double> bigger(ring_.size() * 2);
    std::vector<double> bigger_start(ring_.size() * 2);
    for (size_t i = 0; i < in_flight; ++i) {
      bigger[i] = ring_[(head_ + i) & (ring_.size() - 1)];
      bigger_start[i] = transfer_start_[(head_ + i) & (ring_.size() - 1)];
    }
    ring_.swap(bigger);
    transfer_start_.swap(bigger_start);
    head_ = 0;
  }
  double start = std::max(now_, last_end_);
  double duration = copy_seconds(copy.bytes);
  if (params_.pipelined) {
    const double transfer = static_cast<double>(copy.bytes) / params_.bandwidth_bytes_per_s;
    const double end = std::max(now_ + params_.latency_s + transfer, last_end_ + transfer);
    duration = transfer;  // the link is busy for the transfer; the latency overlaps
    start = end - transfer;
  }
  last_end_ = start + duration;
  ++last_ticket_;
  ring_[(head_ + in_flight) & (ring_.size() - 1)] = last_end_;
  transfer_start_[(head_ + in_flight) & (ring_.size() - 1)] = start;
  bytes_moved_ += copy.bytes;
  busy_seconds_ += duration;
  if (log_enabled_) log_.push_back({last_ticket_, copy, now_, start, last_end_});
  return last_ticket_;
}

void SimulatedLink::retire() {
  while (completed_ < last_ticket_ && ring_[head_] <= now_) {
    ++completed_;
    head_ = (head_ + 1) & (ring_.size() - 1);
  }
}

Ticket SimulatedLink::completed() {
  retire();
  return completed_;
}

double SimulatedLink::completion_time(Ticket ticket) const {
  SM_ASSERT(ticket > kNoTicket && ticket <= last_ticket_);
  if (ticket > completed_) {
    return ring_[(head_ + static_cast<size_t>(ticket - completed_ - 1)) & (ring_.size() - 1)];
  }
  const auto index = static_cast<size_t>(ticket - 1);
  SM_ASSERT_MSG(log_enabled_ && index < log_.size() && log_[index].ticket == ticket,
                "completion time of a retired ticket needs the log, enabled before the first copy");
  return log_[index].end;
}

void SimulatedLink::wait(Ticket ticket) {
  SM_ASSERT(ticket <= last_ticket_);
  retire();
  if (ticket <= completed_) return;
  now_ = std::max(now_, completion_time(ticket));
  retire();
}

void SimulatedLink::advance(double seconds) {
  SM_ASSERT(seconds >= 0);
  if (params_.compute_slowdown == 0) {  // compute does not share the link's resources
    now_ += seconds;
    return;
  }
  // No retire() here: completion_time() may still be asked about tickets completed meanwhile.
  const double rate_busy = 1.0 - params_.compute_slowdown;
  // Busy intervals [transfer start, end] of the copies in flight are disjoint and in ticket
  // order (one FIFO); between them, and after the last, the work runs at full speed.
  double left = seconds;
  const auto in_flight = static_cast<size_t>(last_ticket_ - completed_);
  for (size_t i = 0; i < in_flight && left > 0; ++i) {
    const size_t at = (head_ + i) & (ring_.size() - 1);
    const double busy_from = std::max(now_, transfer_start_[at]);
    const double busy_to = ring_[at];
    if (busy_to <= now_) continue;
    const double idle = busy_from - now_;  // full speed up to this transfer
    if (left <= idle) break;
    left -= idle;
    now_ = busy_from;
    const double busy_work = (busy_to - busy_from) * rate_busy;
    if (left <= busy_work) {
      now_ += left / rate_busy;
      return;
    }
    left -= busy_work;
    now_ = busy_to;
  }
  now_ += left;
}

}  // namespace steermoe::link
