#include "link/simulated_link.hpp"

#include <algorithm>

#include "common/error.hpp"

namespace steermoe::link {

SimulatedLink::SimulatedLink(const SimulatedLinkParams& params)
    : params_(params), ring_(64), transfer_start_(64), transfer_end_(64) {
  if (!(params.bandwidth_bytes_per_s > 0))
    fail("simulated link", "bandwidth", "must be > 0 bytes/s, got {}",
         params.bandwidth_bytes_per_s);
  if (!(params.latency_s >= 0))
    fail("simulated link", "latency", "must be >= 0 s, got {}", params.latency_s);
  if (!(params.compute_slowdown >= 0 && params.compute_slowdown < 1))
    fail("simulated link", "compute slowdown", "must be in [0, 1), got {}",
         params.compute_slowdown);
  if (!(params.channels >= 1 && params.channels <= 1024))
    fail("simulated link", "channels", "must be in [1, 1024], got {}", params.channels);
  channel_free_.assign(static_cast<size_t>(params.channels), 0.0);
}

double SimulatedLink::copy_seconds(int64_t bytes) const {
  return params_.latency_s +
         static_cast<double>(bytes) * params_.channels / params_.bandwidth_bytes_per_s;
}

Ticket SimulatedLink::enqueue(const CopyRequest& copy) {
  SM_ASSERT(copy.bytes >= 0);
  const size_t in_flight = static_cast<size_t>(last_ticket_ - completed_);
  if (in_flight == ring_.size()) {
    // Grow the rings, unrolling them so that head_ becomes 0 (only happens at new peaks).
    const size_t mask = ring_.size() - 1;
    std::vector<double> bigger(ring_.size() * 2);
    std::vector<double> bigger_start(ring_.size() * 2);
    std::vector<double> bigger_end(ring_.size() * 2);
    for (size_t i = 0; i < in_flight; ++i) {
      bigger[i] = ring_[(head_ + i) & mask];
      bigger_start[i] = transfer_start_[(head_ + i) & mask];
      bigger_end[i] = transfer_end_[(head_ + i) & mask];
    }
    ring_.swap(bigger);
    transfer_start_.swap(bigger_start);
    transfer_end_.swap(bigger_end);
    head_ = 0;
  }
  // The channel that frees first (the lowest such index: deterministic). Every channel's free
  // time only grows and now_ never falls, so transfers start in ticket order.
  const auto channel = static_cast<size_t>(
      std::min_element(channel_free_.begin(), channel_free_.end()) - channel_free_.begin());
  const double free_at = channel_free_[channel];
  const double transfer =
      static_cast<double>(copy.bytes) * params_.channels / params_.bandwidth_bytes_per_s;
  double start = std::max(now_, free_at);
  double transfer_end = start + params_.latency_s + transfer;
  if (params_.pipelined) {
    // The channel is busy for the transfer only; the latency overlaps the previous copy's.
    transfer_end = std::max(now_ + params_.latency_s + transfer, free_at + transfer);
    start = transfer_end - transfer;
  }
  channel_free_[channel] = transfer_end;
  // Transfers start in ticket order, so the union grows by what this one adds past the latest
  // end so far.
  busy_seconds_ += std::max(0.0, transfer_end - std::max(start, last_end_));
  // Reported in enqueue order: complete once every earlier copy is, too.
  last_end_ = std::max(last_end_, transfer_end);
  ++last_ticket_;
  const size_t at = (head_ + in_flight) & (ring_.size() - 1);
  ring_[at] = last_end_;
  transfer_start_[at] = start;
  transfer_end_[at] = transfer_end;
  bytes_moved_ += copy.bytes;
  if (log_enabled_)
    log_.push_back({.ticket = last_ticket_,
                    .copy = copy,
                    .enqueued = now_,
                    .start = start,
                    .transfer_end = transfer_end,
                    .end = last_end_,
                    .channel = static_cast<int>(channel)});
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
  double left = seconds;
  // Work from now_ to the start of a busy stretch runs at full speed, inside it at rate_busy.
  // Returns true once the work is done.
  const auto through = [&](double busy_from, double busy_to) {
    busy_from = std::max(now_, busy_from);
    if (busy_to <= now_) return false;
    const double idle = busy_from - now_;
    if (left <= idle) return true;
    left -= idle;
    now_ = busy_from;
    const double busy_work = (busy_to - busy_from) * rate_busy;
    if (left <= busy_work) {
      now_ += left / rate_busy;
      left = 0;
      return true;
    }
    left -= busy_work;
    now_ = busy_to;
    return false;
  };
  // The transfers in flight start in ticket order; with several channels they overlap, so the
  // link is busy over their union, walked as merged stretches.
  const auto in_flight = static_cast<size_t>(last_ticket_ - completed_);
  const size_t mask = ring_.size() - 1;
  double stretch_from = 0, stretch_to = -1;  // none yet
  for (size_t i = 0; i < in_flight; ++i) {
    const size_t at = (head_ + i) & mask;
    if (transfer_start_[at] <= stretch_to) {
      stretch_to = std::max(stretch_to, transfer_end_[at]);
      continue;
    }
    if (stretch_to >= 0 && through(stretch_from, stretch_to)) {
      now_ += left;  // 0 unless the work ended before the stretch
      return;
    }
    stretch_from = transfer_start_[at];
    stretch_to = transfer_end_[at];
  }
  if (stretch_to >= 0) through(stretch_from, stretch_to);
  now_ += left;  // what is left after the last stretch (or before it) runs at full speed
}

}  // namespace steermoe::link
