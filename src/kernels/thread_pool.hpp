// A small fixed-size thread pool with a static parallel-for over index ranges (the `-t` flag).
//
// The partition of [0, n) depends only on n, grain and the pool size, and each index is handled by
// exactly one thread; kernels built on it compute every output element in one thread with a fixed
// inner order, so results do not depend on the thread count. parallel_for allocates nothing.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace steermoe::kernels {

class ThreadPool {
 public:
  // n_threads >= 1 counts the calling thread: a pool of 1 runs everything inline.
  explicit ThreadPool(size_t n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  size_t size() const { return n_threads_; }

  // Calls fn(begin, end) over disjoint contiguous chunks covering [0, n); chunk boundaries are
  // multiples of `grain` (except n). Chunk t runs on thread t; the caller runs chunk 0 and returns
  // when all chunks are done. Exceptions must not escape fn. Not reentrant (one call at a time;
  // fn must not call parallel_for on the same pool).
  template <typename Fn>
  void parallel_for(size_t n, Fn&& fn, size_t grain = 1) {
    using F = std::remove_reference_t<Fn>;
    run(n, grain, const_cast<void*>(static_cast<const void*>(&fn)),
        [](void* obj, size_t begin, size_t end) { (*static_cast<F*>(obj))(begin, end); });
  }

  // The [begin, end) chunk thread `t` of `n_threads` gets for n items at the given grain.
  static std::pair<size_t, size_t> chunk(size_t n, size_t grain, size_t n_threads, size_t t);

 private:
  using Trampoline = void (*)(void*, size_t, size_t);
  void run(size_t n, size_t grain, void* obj, Trampoline call);
  void worker(size_t index);

  size_t n_threads_;
  std::vector<std::thread> workers_;
  // The current job; published by bumping generation_.
  void* job_obj_ = nullptr;
  Trampoline job_call_ = nullptr;
  size_t job_n_ = 0;
  size_t job_grain_ = 1;
  std::atomic<uint64_t> generation_{0};
  std::atomic<size_t> pending_{0};
  std::atomic<bool> stop_{false};
};

}  // namespace steermoe::kernels
