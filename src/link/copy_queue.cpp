#include "link/copy_queue.hpp"

#include <bit>

#include "common/error.hpp"

namespace steermoe::link {

CopyQueue::CopyQueue(size_t capacity) : ring_(std::bit_ceil(std::max<size_t>(capacity, 2))) {}

Ticket CopyQueue::push(const CopyRequest& copy, double now) {
  std::lock_guard lock(mutex_);
  SM_ASSERT_MSG(!closed_, "copy enqueued on a closed link");
  if (size_ == ring_.size()) {
    std::vector<QueuedCopy> bigger(ring_.size() * 2);
    for (size_t i = 0; i < size_; ++i) bigger[i] = ring_[(head_ + i) & (ring_.size() - 1)];
    ring_.swap(bigger);
    head_ = 0;
  }
  const Ticket ticket = last_ticket_.load(std::memory_order_relaxed) + 1;
  ring_[(head_ + size_) & (ring_.size() - 1)] = {ticket, copy, now};
  ++size_;
  last_ticket_.store(ticket, std::memory_order_release);
  ready_.notify_one();
  return ticket;
}

bool CopyQueue::pop(QueuedCopy& out, bool block) {
  std::unique_lock lock(mutex_);
  if (block) ready_.wait(lock, [this] { return size_ > 0 || closed_; });
  if (size_ == 0) return false;
  out = ring_[head_];
  head_ = (head_ + 1) & (ring_.size() - 1);
  --size_;
  return true;
}

bool CopyQueue::pop_until(QueuedCopy& out, std::chrono::steady_clock::time_point deadline) {
  std::unique_lock lock(mutex_);
  ready_.wait_until(lock, deadline, [this] { return size_ > 0 || closed_; });
  if (size_ == 0) return false;
  out = ring_[head_];
  head_ = (head_ + 1) & (ring_.size() - 1);
  --size_;
  return true;
}

bool CopyQueue::closed() {
  std::lock_guard lock(mutex_);
  return closed_;
}

void CopyQueue::close() {
  std::lock_guard lock(mutex_);
  closed_ = true;
  ready_.notify_all();
}

Ticket Completion::completed() const {
  if (failed()) rethrow();
  return watermark();
}

void Completion::wait(Ticket ticket) {
  if (watermark() >= ticket) return;
  if (failed()) rethrow();
  waiters_.fetch_add(1, std::memory_order_seq_cst);
  {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return watermark() >= ticket || failed(); });
  }
  waiters_.fetch_sub(1, std::memory_order_relaxed);
  if (watermark() < ticket) rethrow();
}

void Completion::publish(Ticket ticket) {
  watermark_.store(ticket, std::memory_order_seq_cst);
  if (waiters_.load(std::memory_order_seq_cst) > 0) {
    // Taking the mutex orders this notify after a waiter's predicate check.
    std::lock_guard lock(mutex_);
    changed_.notify_all();
  }
}

void Completion::fail(std::string message) {
  std::lock_guard lock(mutex_);
  if (failed_.load(std::memory_order_relaxed)) return;
  error_ = std::move(message);
  failed_.store(true, std::memory_order_seq_cst);
  changed_.notify_all();
}

std::string Completion::error() const {
  std::lock_guard lock(mutex_);
  return error_;
}

void Completion::rethrow() const {
  throw Error(error());
}

}  // namespace steermoe::link
