// Plumbing shared by the links that copy on a thread of their own (emulated, disk): the FIFO of
// enqueued copies and the completion watermark with the error a copy thread may record.
// Internal to link/ (the engine sees only link.hpp and the link classes).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <string>
#include <vector>

#include "link/link.hpp"

namespace steermoe::link {

struct QueuedCopy {
  Ticket ticket = kNoTicket;
  CopyRequest copy;
  double enqueued = 0;  // link clock at enqueue
};

// Mutex + condition variable FIFO between the caller (push) and one copy thread (pop). Storage is
// a ring that grows only when more copies are queued than ever before, so steady state
// allocates nothing.
class CopyQueue {
 public:
  explicit CopyQueue(size_t capacity = 64);
  // Appends a copy and returns its ticket (1, 2, ...).
  Ticket push(const CopyRequest& copy, double now);
  // Takes the oldest copy. block: waits until one is queued or the queue is closed. Returns
  // false when there is none (closed, or !block and empty).
  bool pop(QueuedCopy& out, bool block);
  // Takes the oldest copy, waiting for one until `deadline` at most.
  bool pop_until(QueuedCopy& out, std::chrono::steady_clock::time_point deadline);
  // Wakes a blocked pop(), which then returns false once the queue is empty.
  void close();
  Ticket last_ticket() const { return last_ticket_.load(std::memory_order_acquire); }
  bool closed();

 private:
  std::mutex mutex_;
  std::condition_variable ready_;
  std::vector<QueuedCopy> ring_;  // capacity a power of two
  size_t head_ = 0, size_ = 0;
  bool closed_ = false;
  std::atomic<Ticket> last_ticket_{kNoTicket};
};

// The FIFO watermark: the copy thread publishes the highest ticket up to which every copy has
// finished, or records an error; callers read it (completed) or block on it (wait), and get the
// error rethrown as steermoe::Error on their own thread.
class Completion {
 public:
  // Throws the recorded error, if any; otherwise the watermark.
  Ticket completed() const;
  // Blocks until the watermark reaches `ticket` (returns) or an error is recorded (throws).
  void wait(Ticket ticket);
  // Copy thread: every ticket <= `ticket` has finished.
  void publish(Ticket ticket);
  // Copy thread: the link failed; the watermark never moves again. Only the first error is kept.
  void fail(std::string message);

  // Non-throwing views (tests, reports).
  Ticket watermark() const { return watermark_.load(std::memory_order_acquire); }
  bool failed() const { return failed_.load(std::memory_order_acquire); }
  std::string error() const;

 private:
  [[noreturn]] void rethrow() const;

  std::atomic<Ticket> watermark_{kNoTicket};
  std::atomic<bool> failed_{false};
  std::atomic<int> waiters_{0};
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::string error_;
};

}  // namespace steermoe::link
