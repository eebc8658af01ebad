// A small fixed-size thread pool with a load-balanced parallel-for over index ranges (the `-t`
// flag).
//
// The partition of [0, n) into chunks depends only on n, grain and the pool size (chunk_count,
// chunk), and each chunk is run by exactly one thread; kernels built on it compute every output
// element within one chunk with a fixed inner order, so results do not depend on the thread count
// or on which thread ran which chunk. There are up to kChunksPerThread chunks per thread (each at
// least kMinUnitsPerChunk grains long), and threads claim the next unclaimed chunk whenever they
// are free (work stealing from one shared counter): a worker the OS has not scheduled yet, or a
// vCPU the hypervisor has slowed, holds the others up by at most about one chunk, not by a fixed
// share of the rows. parallel_for allocates nothing.
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

// Grow-only scratch buffers (see detail::thread_scratch); one per chunk index of a pool, so a
// buffer is used by one thread at a time and the calls of one warm-up have grown every buffer a
// later call of the same sizes uses, whichever thread runs which chunk.
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

// The physical cores this process may run on (its affinity mask; hyperthreads of one core count
// once, as a bandwidth-bound decode gains nothing from a core's second thread): the default
// thread count of `run` and `serve`, as llama.cpp's. At least 1.
// Within a CPU quota (cgroup v2 cpu.max, v1 cpu.cfs_quota_us / cpu.cfs_period_us: `docker
// --cpus`, Kubernetes limits) at most the quota's whole cores, rounded up.
int physical_core_count();
// Whole cores a quota allows, rounded up: "max" or a quota <= 0 is none (0).
int cpu_quota_cores(int64_t quota_us, int64_t period_us);

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

  // Calls fn(begin, end) over chunk_count(n, grain, size()) disjoint contiguous chunks covering
  // [0, n), chunk(n, grain, count, c) for c = 0, 1, ...; chunk boundaries are multiples of
  // `grain` (except n). The caller and the workers claim chunks in order until none is left, each
  // thread as many as it gets to; returns when all chunks are done. fn may run on any thread, in
  // any order and concurrently with itself. Exceptions must not escape fn. Not reentrant (one call
  // at a time; fn must not call parallel_for on the same pool).
  template <typename Fn>
  void parallel_for(size_t n, Fn&& fn, size_t grain = 1) {
    using F = std::remove_reference_t<Fn>;
    run(n, grain, const_cast<void*>(static_cast<const void*>(&fn)),
        [](void* obj, size_t begin, size_t end) { (*static_cast<F*>(obj))(begin, end); });
  }

  // At most this many chunks per thread: enough that a thread slowed for a while leaves its later
  // chunks to the others, few enough that the per-chunk cost (a claim, the kernels' per-call
  // setup such as quantizing x) stays small next to the chunk's work.
  static constexpr size_t kChunksPerThread = 4;
  // Chunks are at least this many grains long when there are more chunks than threads (matvec's
  // 16-row grain: 64 rows), so row tiles and weight prefetch still run over long ranges.
  static constexpr size_t kMinUnitsPerChunk = 4;

  // The claim word holds the chunk count and index in 16 bits each.
  static constexpr size_t kMaxChunks = 0xffff;

  // How many chunks parallel_for splits n items into at the given grain on n_threads threads: 0
  // for n = 0; 1 for one thread or at most one grain; otherwise, for units = ceil(n / grain),
  // max(n_threads, min(n_threads * kChunksPerThread, units / kMinUnitsPerChunk)) capped at units
  // and kMaxChunks. A function of n, grain and the pool size only, never of timing.
  static size_t chunk_count(size_t n, size_t grain, size_t n_threads);

  // The [begin, end) chunk `c` of `n_chunks` for n items at the given grain: the grains are dealt
  // out in order, the first (units % n_chunks) chunks one more than the others.
  static std::pair<size_t, size_t> chunk(size_t n, size_t grain, size_t n_chunks, size_t c);

 private:
  using Trampoline = void (*)(void*, size_t, size_t);
  void run(size_t n, size_t grain, void* obj, Trampoline call);
  void run_chunks(uint64_t generation);
  void worker();
  void stop_threads() noexcept;

  size_t n_threads_;
  std::vector<std::thread> workers_;
  std::unique_ptr<ScratchArena[]> arenas_;  // one per chunk index: size() * kChunksPerThread
  // The current job; published by bumping generation_.
  void* job_obj_ = nullptr;
  Trampoline job_call_ = nullptr;
  size_t job_n_ = 0;
  size_t job_grain_ = 1;
  std::atomic<uint64_t> generation_{0};
  // (generation & 0xffffffff) << 32 | chunk count << 16 | next unclaimed chunk; claims of an old
  // job fail. The count travels in the word so that a thread that finds every chunk claimed decides
  // so without reading the job's fields, which the caller may already be rewriting.
  std::atomic<uint64_t> claim_{0};
  std::atomic<size_t> chunks_done_{0};
  std::atomic<bool> stop_{false};
};

}  // namespace steermoe::kernels
