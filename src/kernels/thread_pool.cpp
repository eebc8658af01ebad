#include "kernels/thread_pool.hpp"

#include <algorithm>

#include "common/error.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define SM_CPU_RELAX() _mm_pause()
#else
#define SM_CPU_RELAX() ((void)0)
#endif

namespace steermoe::kernels {
namespace {

// Decode issues hundreds of short parallel_for calls per token, so waiting threads spin a little
// before sleeping on a futex (std::atomic::wait): the next job usually arrives within microseconds
// and a futex wake-up costs more than that.
constexpr int kSpinIterations = 4000;

template <typename T, typename Pred>
void spin_then_wait(const std::atomic<T>& value, Pred done) {
  for (int i = 0; i < kSpinIterations; ++i) {
    if (done(value.load(std::memory_order_acquire))) return;
    SM_CPU_RELAX();
  }
  for (;;) {
    const T seen = value.load(std::memory_order_acquire);
    if (done(seen)) return;
    value.wait(seen, std::memory_order_acquire);
  }
}

}  // namespace

ThreadPool::ThreadPool(size_t n_threads) : n_threads_(n_threads) {
  if (n_threads == 0) throw Error("thread pool: threads: must be at least 1");
  workers_.reserve(n_threads - 1);
  for (size_t t = 1; t < n_threads; ++t) workers_.emplace_back([this, t] { worker(t); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  for (auto& w : workers_) w.join();
}

std::pair<size_t, size_t> ThreadPool::chunk(size_t n, size_t grain, size_t n_threads, size_t t) {
  grain = std::max<size_t>(grain, 1);
  const size_t units = (n + grain - 1) / grain;
  const size_t base = units / n_threads;
  const size_t extra = units % n_threads;
  const size_t first = t * base + std::min(t, extra);
  const size_t count = base + (t < extra ? 1 : 0);
  return {std::min(first * grain, n), std::min((first + count) * grain, n)};
}

void ThreadPool::run(size_t n, size_t grain, void* obj, Trampoline call) {
  if (n == 0) return;
  if (n_threads_ == 1 || n <= grain) {
    call(obj, 0, n);
    return;
  }
  job_obj_ = obj;
  job_call_ = call;
  job_n_ = n;
  job_grain_ = grain;
  pending_.store(n_threads_ - 1, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();
  const auto [begin, end] = chunk(n, grain, n_threads_, 0);
  if (begin < end) call(obj, begin, end);
  spin_then_wait(pending_, [](size_t left) { return left == 0; });
}

void ThreadPool::worker(size_t index) {
  uint64_t seen = 0;
  for (;;) {
    spin_then_wait(generation_, [seen](uint64_t g) { return g != seen; });
    seen = generation_.load(std::memory_order_acquire);
    if (stop_.load(std::memory_order_acquire)) return;
    const auto [begin, end] = chunk(job_n_, job_grain_, n_threads_, index);
    if (begin < end) job_call_(job_obj_, begin, end);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) pending_.notify_one();
  }
}

}  // namespace steermoe::kernels
