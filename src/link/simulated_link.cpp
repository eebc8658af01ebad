#include "link/simulated_link.hpp"

#include <algorithm>
#include <limits>
#include <type_traits>

#include "common/error.hpp"

namespace steermoe::link {

SimulatedLink::SimulatedLink(const SimulatedLinkParams& params)
    : params_(params),
      ring_(64),
      transfer_start_(64),
      transfer_end_(64),
      enqueued_(64),
      transfer_s_(64),
      channel_(64) {
  if (!(params.bandwidth_bytes_per_s > 0))
    fail("simulated link", "bandwidth", "must be > 0 bytes/s, got {}",
         params.bandwidth_bytes_per_s);
  if (!(params.latency_s >= 0))
    fail("simulated link", "latency", "must be >= 0 s, got {}", params.latency_s);
  if (!(params.compute_slowdown >= 0 && params.compute_slowdown < 1))
    fail("simulated link", "compute slowdown", "must be in [0, 1), got {}",
         params.compute_slowdown);
  if (!(params.transfer_slowdown >= 0 && params.transfer_slowdown < 1))
    fail("simulated link", "transfer slowdown", "must be in [0, 1), got {}",
         params.transfer_slowdown);
  if (!(params.channels >= 1 && params.channels <= 1024))
    fail("simulated link", "channels", "must be in [1, 1024], got {}", params.channels);
  channel_free_.assign(static_cast<size_t>(params.channels), 0.0);
  channel_state_.assign(static_cast<size_t>(params.channels), {});
}

double SimulatedLink::copy_seconds(int64_t bytes) const {
  return params_.latency_s +
         static_cast<double>(bytes) * params_.channels / params_.bandwidth_bytes_per_s;
}

void SimulatedLink::grow_rings() {
  // Unrolled so that head_ becomes 0 (only happens at new peaks of copies in flight).
  const size_t in_flight = static_cast<size_t>(last_ticket_ - completed_);
  const size_t mask = ring_.size() - 1;
  const auto unroll = [&](auto& ring) {
    std::remove_reference_t<decltype(ring)> bigger(ring.size() * 2);
    for (size_t i = 0; i < in_flight; ++i) bigger[i] = ring[(head_ + i) & mask];
    ring.swap(bigger);
  };
  unroll(ring_);
  unroll(transfer_start_);
  unroll(transfer_end_);
  unroll(enqueued_);
  unroll(transfer_s_);
  unroll(channel_);
  head_ = 0;
}

Ticket SimulatedLink::enqueue(const CopyRequest& copy) {
  SM_ASSERT(copy.bytes >= 0);
  if (static_cast<size_t>(last_ticket_ - completed_) == ring_.size()) grow_rings();
  const size_t in_flight = static_cast<size_t>(last_ticket_ - completed_);
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
  enqueued_[at] = now_;
  transfer_s_[at] = transfer;
  channel_[at] = static_cast<int>(channel);
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
    retired_end_ = ring_[head_];
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
  if (params_.compute_slowdown == 0 && params_.transfer_slowdown == 0) {
    now_ += seconds;  // the work and the link share nothing
    return;
  }
  advance_with_events(seconds);
}

void SimulatedLink::advance_with_events(double seconds) {
  if (seconds == 0) return;
  // No retire() here: completion_time() may still be asked about tickets completed meanwhile.
  const auto in_flight = static_cast<size_t>(last_ticket_ - completed_);
  const size_t mask = ring_.size() - 1;
  const auto ring_at = [&](size_t offset) { return (head_ + offset) & mask; };
  const double latency = params_.latency_s;
  // The state at now_ from the projection: the copy each channel holds (its transfer started,
  // or its latency on the channel), the copies not yet on a channel (a suffix: transfers start
  // in ticket order).
  for (ChannelState& c : channel_state_) c.busy = false;
  size_t queued = in_flight;  // the first copy not yet on a channel
  for (size_t i = 0; i < in_flight; ++i) {
    const size_t at = ring_at(i);
    const double start = transfer_start_[at], end = transfer_end_[at];
    if (start > now_) {
      queued = i;
      break;
    }
    if (end <= now_) continue;  // transferred, waiting for an earlier copy to be reported
    ChannelState& c = channel_state_[static_cast<size_t>(channel_[at])];
    const double transfer_from = params_.pipelined ? start : start + latency;
    c = {.copy = i,
         .busy = true,
         .latency_end = std::max(now_, transfer_from),
         .left = end - std::max(now_, transfer_from)};
  }
  const auto ready = [&](size_t i) {  // when copy i may take a channel
    return enqueued_[ring_at(i)] + (params_.pipelined ? latency : 0.0);
  };
  // The part of the in-flight copies' busy union after now_, before and after: busy_seconds_
  // follows the re-timing (starts stay in ticket order, so one merge pass each).
  const double origin = now_;
  const auto busy_after_now = [&] {
    double total = 0, from = 0, to = -1;
    for (size_t i = 0; i < in_flight; ++i) {
      const size_t at = ring_at(i);
      const double a = std::max(origin, transfer_start_[at]), b = transfer_end_[at];
      if (b <= a) continue;
      if (a <= to) {
        to = std::max(to, b);
        continue;
      }
      if (to > from) total += to - from;
      from = a;
      to = b;
    }
    if (to > from) total += to - from;
    return total;
  };
  const bool retime = params_.transfer_slowdown > 0;
  const double busy_before = retime ? busy_after_now() : 0;

  double t = now_, left = seconds, work_end = now_;
  bool working = true;
  for (;;) {
    // Idle channels take the next copies in ticket order, lowest channel first.
    for (size_t ch = 0; ch < channel_state_.size() && queued < in_flight; ++ch) {
      ChannelState& c = channel_state_[ch];
      if (c.busy || ready(queued) > t) continue;
      const size_t at = ring_at(queued);
      c = {.copy = queued,
           .busy = true,
           .latency_end = params_.pipelined ? t : t + latency,
           .left = transfer_s_[at]};
      if (retime) {
        transfer_start_[at] = t;
        channel_[at] = static_cast<int>(ch);
      }
      ++queued;
    }
    bool occupied = false, idle_channel = false;
    for (const ChannelState& c : channel_state_) {
      occupied = occupied || c.busy;
      idle_channel = idle_channel || !c.busy;
    }
    const double work_rate = occupied ? 1.0 - params_.compute_slowdown : 1.0;
    const double link_rate = working ? 1.0 - params_.transfer_slowdown : 1.0;
    // Without re-timing the transfers keep their times: only the work's end is sought.
    if (!retime && !working) break;
    double next = std::numeric_limits<double>::infinity();
    if (working) next = t + left / work_rate;
    for (const ChannelState& c : channel_state_) {
      if (!c.busy) continue;
      next = std::min(next, c.latency_end > t ? c.latency_end : t + c.left / link_rate);
    }
    if (queued < in_flight && idle_channel) next = std::min(next, ready(queued));
    if (next == std::numeric_limits<double>::infinity()) break;
    const double dt = next - t;
    if (working) {
      if (t + left / work_rate <= next) {
        left = 0;
        work_end = next;
        working = false;
      } else {
        left -= dt * work_rate;
      }
    }
    for (ChannelState& c : channel_state_) {
      if (!c.busy || c.latency_end > t) continue;  // idle, or in its latency until >= next
      if (t + c.left / link_rate <= next) {
        c.busy = false;
        if (retime) transfer_end_[ring_at(c.copy)] = next;
      } else {
        c.left -= dt * link_rate;
      }
    }
    t = next;
  }
  now_ = work_end;
  if (!retime) return;
  // The projection rewritten: completions in enqueue order, the link's watermark, each channel's
  // last copy, the busy union and the log.
  busy_seconds_ += busy_after_now() - busy_before;
  // A channel may have lost its copies to another (the lowest idle channel takes the next copy):
  // it is free by now, whatever it held before.
  for (double& free_at : channel_free_) free_at = std::min(free_at, origin);
  double end = retired_end_;
  for (size_t i = 0; i < in_flight; ++i) {
    const size_t at = ring_at(i);
    end = std::max(end, transfer_end_[at]);
    ring_[at] = end;
    channel_free_[static_cast<size_t>(channel_[at])] = transfer_end_[at];
    if (log_enabled_ && log_.size() == static_cast<size_t>(last_ticket_)) {
      CopyEvent& e = log_[static_cast<size_t>(completed_) + i];
      e.start = transfer_start_[at];
      e.transfer_end = transfer_end_[at];
      e.end = end;
      e.channel = channel_[at];
    }
  }
  if (in_flight > 0) last_end_ = end;  // re-timing only moves completions later
}

}  // namespace steermoe::link
