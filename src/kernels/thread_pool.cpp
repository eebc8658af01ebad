#include "kernels/thread_pool.hpp"

#include <sched.h>

#include <algorithm>
#include <fstream>
#include <new>
#include <set>
#include <string>
#include <system_error>

#include "common/error.hpp"
#include "kernels/kernels_internal.hpp"

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

namespace {
thread_local ScratchArena* t_current_arena = nullptr;
}  // namespace

void ScratchArena::AlignedFree::operator()(void* p) const {
  ::operator delete (p, std::align_val_t{64});
}

void* ScratchArena::get(size_t bytes, int slot) {
  SM_ASSERT(slot >= 0 && slot < kSlots);
  Slot& s = slots_[slot];
  if (s.bytes < bytes) {
    const size_t grown = std::max(bytes, s.bytes * 2);
    s.data.reset(::operator new (grown, std::align_val_t{64}));
    s.bytes = grown;
  }
  return s.data.get();
}

ScratchArena::Scope::Scope(ScratchArena* arena) : previous_(t_current_arena) {
  t_current_arena = arena;
}
ScratchArena::Scope::~Scope() {
  t_current_arena = previous_;
}

namespace detail {
void* thread_scratch(size_t bytes, int slot) {
  if (t_current_arena != nullptr) return t_current_arena->get(bytes, slot);
  thread_local ScratchArena own;
  return own.get(bytes, slot);
}
}  // namespace detail

namespace {
std::atomic<size_t> g_fail_spawn_at{0};  // test hook: 0 = off
}  // namespace

void ThreadPool::fail_spawn_for_testing(size_t thread_index) {
  g_fail_spawn_at.store(thread_index);
}

ThreadPool::ThreadPool(size_t n_threads)
    : n_threads_(n_threads),
      arenas_(std::make_unique<ScratchArena[]>(
          std::min(std::max<size_t>(n_threads, 1) * kChunksPerThread, kMaxChunks))) {
  if (n_threads == 0) throw Error("thread pool: threads: must be at least 1");
  workers_.reserve(n_threads - 1);
  for (size_t t = 1; t < n_threads; ++t) {
    try {
      if (g_fail_spawn_at.load() == t) {
        throw std::system_error(std::make_error_code(std::errc::resource_unavailable_try_again));
      }
      workers_.emplace_back([this] { worker(); });
    } catch (const std::system_error& e) {
      // The destructor does not run for a constructor that throws: stop and join the threads
      // already started here, or their std::thread destructors would call std::terminate.
      stop_threads();
      throw Error(fmt::format(
          "threads: cannot start thread {} of {} ({}); expected the system to allow {} threads "
          "(lower -t or raise the process/thread limit)",
          t + 1, n_threads, e.code().message(), n_threads));
    }
  }
}

void ThreadPool::stop_threads() noexcept {
  stop_.store(true, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  for (auto& w : workers_) {
    if (w.joinable()) w.join();
  }
  workers_.clear();
}

ThreadPool::~ThreadPool() {
  stop_threads();
}

size_t ThreadPool::chunk_count(size_t n, size_t grain, size_t n_threads) {
  if (n == 0) return 0;
  grain = std::max<size_t>(grain, 1);
  const size_t units = n / grain + (n % grain != 0 ? 1 : 0);
  if (n_threads <= 1 || units <= 1) return 1;
  const size_t most =
      n_threads > kMaxChunks / kChunksPerThread ? kMaxChunks : n_threads * kChunksPerThread;
  const size_t count = std::max(n_threads, std::min(most, units / kMinUnitsPerChunk));
  return std::min({count, units, kMaxChunks});
}

std::pair<size_t, size_t> ThreadPool::chunk(size_t n, size_t grain, size_t n_chunks, size_t c) {
  grain = std::max<size_t>(grain, 1);
  const size_t units = (n + grain - 1) / grain;
  const size_t base = units / n_chunks;
  const size_t extra = units % n_chunks;
  const size_t first = c * base + std::min(c, extra);
  const size_t count = base + (c < extra ? 1 : 0);
  return {std::min(first * grain, n), std::min((first + count) * grain, n)};
}

void ThreadPool::run(size_t n, size_t grain, void* obj, Trampoline call) {
  const size_t chunks = chunk_count(n, grain, n_threads_);
  if (chunks == 0) return;
  if (chunks == 1) {
    const ScratchArena::Scope scope(&arenas_[0]);
    call(obj, 0, n);
    return;
  }
  job_obj_ = obj;
  job_call_ = call;
  job_n_ = n;
  job_grain_ = grain;
  chunks_done_.store(0, std::memory_order_relaxed);
  const uint64_t generation = generation_.load(std::memory_order_relaxed) + 1;
  // Release: a thread whose claim succeeds sees the job fields written above.
  claim_.store((generation & 0xffffffffu) << 32 | uint64_t{chunks} << 16,
               std::memory_order_release);
  generation_.store(generation, std::memory_order_release);
  generation_.notify_all();
  run_chunks(generation);
  spin_then_wait(chunks_done_, [chunks](size_t done) { return done == chunks; });
}

void ThreadPool::run_chunks(uint64_t generation) {
  const uint64_t tag = generation & 0xffffffffu;
  for (;;) {
    uint64_t claim = claim_.load(std::memory_order_acquire);
    do {
      if ((claim >> 32) != tag || (claim & 0xffffu) >= ((claim >> 16) & 0xffffu)) return;
    } while (!claim_.compare_exchange_weak(claim, claim + 1, std::memory_order_acq_rel,
                                           std::memory_order_acquire));
    // The job cannot change until this chunk is counted done, so its fields are stable here.
    const size_t index = claim & 0xffffu;
    const size_t chunks = (claim >> 16) & 0xffffu;
    const auto [begin, end] = chunk(job_n_, job_grain_, chunks, index);
    if (begin < end) {
      // The arena of the chunk index: only this thread runs this chunk.
      const ScratchArena::Scope scope(&arenas_[index]);
      job_call_(job_obj_, begin, end);
    }
    if (chunks_done_.fetch_add(1, std::memory_order_acq_rel) + 1 == chunks) {
      chunks_done_.notify_one();
    }
  }
}

void ThreadPool::worker() {
  uint64_t seen = 0;
  for (;;) {
    spin_then_wait(generation_, [seen](uint64_t g) { return g != seen; });
    seen = generation_.load(std::memory_order_acquire);
    if (stop_.load(std::memory_order_acquire)) return;
    run_chunks(seen);
  }
}

namespace {

// This process's CPU quota in whole cores (0: none or unknown), from its cgroup (v2 or v1).
int process_cpu_quota_cores() {
  std::ifstream groups("/proc/self/cgroup");
  std::string line;
  while (std::getline(groups, line)) {
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (controllers.empty()) {  // v2: "0::/path", cpu.max holds "QUOTA PERIOD" or "max PERIOD"
      std::ifstream in("/sys/fs/cgroup" + path + "/cpu.max");
      std::string quota;
      int64_t period = 0;
      if (in >> quota >> period && quota != "max")
        return cpu_quota_cores(std::stoll(quota), period);
    } else if (("," + controllers + ",").find(",cpu,") != std::string::npos) {  // v1
      for (const char* dir : {"/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct"}) {
        std::ifstream q(std::string(dir) + path + "/cpu.cfs_quota_us");
        std::ifstream p(std::string(dir) + path + "/cpu.cfs_period_us");
        int64_t quota = 0, period = 0;
        if (q >> quota && p >> period) return cpu_quota_cores(quota, period);
      }
    }
  }
  return 0;
}

}  // namespace

int physical_core_count() {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (::sched_getaffinity(0, sizeof(allowed), &allowed) != 0)
    return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::set<std::string> cores;  // one entry per core: the list of its hardware threads
  int cpus = 0;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &allowed)) continue;
    ++cpus;
    std::ifstream in("/sys/devices/system/cpu/cpu" + std::to_string(cpu) +
                     "/topology/thread_siblings_list");
    std::string siblings;
    cores.insert(std::getline(in, siblings) ? siblings : "cpu" + std::to_string(cpu));
  }
  int count = std::max(1, static_cast<int>(cores.empty() ? cpus : cores.size()));
  if (const int quota = process_cpu_quota_cores(); quota > 0) count = std::min(count, quota);
  return count;
}

int cpu_quota_cores(int64_t quota_us, int64_t period_us) {
  if (quota_us <= 0 || period_us <= 0) return 0;
  return static_cast<int>((quota_us + period_us - 1) / period_us);
}

}  // namespace steermoe::kernels
