// A small fixed-size thread pool with a static parallel-for over index ranges (the `-t` flag).
//
// The partition of [0, n) into chunks depends only on n, grain and the pool size, and each chunk
// is run by exactly one thread; kernels built on it compute every output element within one chunk
// with a fixed inner order, so results do not depend on the thread count or on which thread ran
// which chunk. Threads claim chunks as they arrive, so a worker the OS has not scheduled yet does
// not hold the caller up (on an oversubscribed machine the caller simply runs its chunk too).
// parallel_for allocates nothing.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace steermoe::kernels {

// Grow-only scratch buffers (see detail::thread_scratch); one per chunk of a pool.
class ScratchArena {
 public:
  static constexpr int kSlots = 4;
  void* get(size_t bytes, int slot);

  // While alive, detail::thread_scratch on this thread uses `arena`.
  class Scope {
   public:
    explicit Scope(ScratchArena* arena);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    ScratchArena* previous_;
  };

 private:
  struct AlignedFree {
    void operator()(void* p) const;
  };
  struct Slot {
    std::unique_ptr<void, AlignedFree> data;
    size_t bytes = 0;
  };
  Slot slots_[kSlots];
};

class ThreadPool {
 public:
  // n_threads >= 1 counts the calling thread: a pool of 1 runs everything inline. If a thread
  // cannot be created, the ones already started are joined and steermoe::Error is thrown.
  explicit ThreadPool(size_t n_threads);
  // Test hook: the next pools fail to create their worker `thread_index` (1-based among the
  // workers' positions; 0 turns the hook off) as if the system refused.
  static void fail_spawn_for_testing(size_t thread_index);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  size_t size() const { return n_threads_; }

  // Calls fn(begin, end) over size() disjoint contiguous chunks covering [0, n); chunk boundaries
  // are multiples of `grain` (except n). The caller and the workers claim chunks until none is
  // left; returns when all chunks are done. Exceptions must not escape fn. Not reentrant (one call
  // at a time; fn must not call parallel_for on the same pool).
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
  void run_chunks(uint64_t generation);
  void worker();
  void stop_threads() noexcept;

  size_t n_threads_;
  std::vector<std::thread> workers_;
  std::unique_ptr<ScratchArena[]> arenas_;  // one per chunk
  // The current job; published by bumping generation_.
  void* job_obj_ = nullptr;
  Trampoline job_call_ = nullptr;
  size_t job_n_ = 0;
  size_t job_grain_ = 1;
  std::atomic<uint64_t> generation_{0};
  // (generation & 0xffffffff) << 32 | next unclaimed chunk; claims of an old job fail.
  std::atomic<uint64_t> claim_{0};
  std::atomic<size_t> chunks_done_{0};
  std::atomic<bool> stop_{false};
};

}  // namespace steermoe::kernels
