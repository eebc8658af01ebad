// Thread pool behaviour, bit-identity of the threaded kernels across thread counts, prefill vs
// decode identity, and no allocation per call after warm-up.
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <new>
#include <thread>
#include <utility>

#include "common/error.hpp"
#include "kernel_test_util.hpp"
#include "kernels/kernels_internal.hpp"

// GCC pairs the replaced operator new with free() when it inlines these replacements and warns;
// the pairing is correct (both sides go through malloc / free).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

// Counts every global allocation, so a test can prove that a warmed-up kernel call makes none.
namespace {
std::atomic<long> g_allocations{0};
}  // namespace

void* operator new(std::size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void* operator new(std::size_t n, std::align_val_t al) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  const auto a = static_cast<std::size_t>(al);
  if (void* p = std::aligned_alloc(a, (n + a - 1) / a * a)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
  std::free(p);
}
void operator delete(void* p, std::align_val_t) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t, std::align_val_t) noexcept {
  std::free(p);
}

namespace steermoe::kernels::testing {
namespace {

// run's and serve's default -t: the cores of this thread's affinity mask, hyperthreads once.
TEST(ThreadPool, PhysicalCoreCountFollowsTheAffinityMask) {
  cpu_set_t all;
  ASSERT_EQ(::sched_getaffinity(0, sizeof(all), &all), 0);
  const int cores = physical_core_count();
  EXPECT_GE(cores, 1);
  EXPECT_LE(cores, CPU_COUNT(&all));
  int first = 0;
  while (!CPU_ISSET(first, &all)) ++first;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  ASSERT_EQ(::sched_setaffinity(0, sizeof(one), &one), 0);
  EXPECT_EQ(physical_core_count(), 1);
  ASSERT_EQ(::sched_setaffinity(0, sizeof(all), &all), 0);
  EXPECT_EQ(physical_core_count(), cores);
}

// A CPU quota bounds the default thread count in whole cores, rounded up (docker --cpus 1.5:
// 2 threads); no quota, none.
TEST(ThreadPool, CpuQuotaInWholeCores) {
  EXPECT_EQ(cpu_quota_cores(150000, 100000), 2);
  EXPECT_EQ(cpu_quota_cores(100000, 100000), 1);
  EXPECT_EQ(cpu_quota_cores(50000, 100000), 1);
  EXPECT_EQ(cpu_quota_cores(400000, 100000), 4);
  EXPECT_EQ(cpu_quota_cores(-1, 100000), 0);  // v1's "no quota"
  EXPECT_EQ(cpu_quota_cores(0, 0), 0);
}

TEST(ThreadPool, ChunksPartitionTheRangeAtGrainBoundaries) {
  for (size_t chunks : {1, 2, 3, 7, 8, 12}) {
    for (size_t n : {0, 1, 5, 16, 100, 1023}) {
      for (size_t grain : {1, 4, 16}) {
        size_t expected_begin = 0;
        for (size_t c = 0; c < chunks; ++c) {
          const auto [b, e] = ThreadPool::chunk(n, grain, chunks, c);
          EXPECT_EQ(b, expected_begin);
          EXPECT_LE(b, e);
          if (e < n) {
            EXPECT_EQ(e % grain, 0u);
          }
          expected_begin = e;
        }
        EXPECT_EQ(expected_begin, n) << chunks << " " << n << " " << grain;
      }
    }
  }
}

// The chunk count rule: more chunks than threads when the range is long enough, each then at least
// kMinUnitsPerChunk grains; never more than kChunksPerThread per thread or one per grain.
TEST(ThreadPool, ChunkCountDependsOnSizesOnlyAndKeepsChunksLong) {
  EXPECT_EQ(ThreadPool::chunk_count(0, 16, 2), 0u);
  EXPECT_EQ(ThreadPool::chunk_count(1000, 16, 1), 1u);
  EXPECT_EQ(ThreadPool::chunk_count(16, 16, 2), 1u);
  EXPECT_EQ(ThreadPool::chunk_count(2048, 16, 2), 2 * ThreadPool::kChunksPerThread);
  EXPECT_EQ(ThreadPool::chunk_count(64, 16, 2), 2u);  // 4 grains: one chunk per thread
  for (size_t threads : {1, 2, 3, 4, 7, 16}) {
    for (size_t n : {1, 2, 5, 15, 16, 17, 63, 64, 65, 100, 257, 1000, 1023, 4096, 100000}) {
      for (size_t grain : {1, 3, 4, 16, 4096}) {
        const size_t units = (n + grain - 1) / grain;
        const size_t count = ThreadPool::chunk_count(n, grain, threads);
        SCOPED_TRACE(::testing::Message() << threads << " threads, n " << n << ", grain " << grain);
        EXPECT_GE(count, 1u);
        EXPECT_LE(count,
                  std::max<size_t>(1, std::min(units, threads * ThreadPool::kChunksPerThread)));
        if (threads > 1) {
          EXPECT_GE(count, std::min(threads, units));
        }
        if (count > threads) {
          for (size_t c = 0; c + 1 < count; ++c) {  // the last may end at n inside a grain
            const auto [b, e] = ThreadPool::chunk(n, grain, count, c);
            EXPECT_GE(e - b, ThreadPool::kMinUnitsPerChunk * grain) << c;
          }
        }
      }
    }
  }
}

// The chunks parallel_for runs are exactly chunk(n, grain, chunk_count(...), c): each index once,
// boundaries at multiples of grain, whichever threads ran them.
TEST(ThreadPool, ParallelForRunsExactlyThePartition) {
  std::vector<std::pair<size_t, size_t>> ran(ThreadPool::kMaxChunks);
  for (size_t threads : {1, 2, 3, 4}) {
    ThreadPool pool(threads);
    for (size_t n : {1, 5, 16, 17, 100, 257, 1000, 1023, 4099}) {
      for (size_t grain : {1, 3, 16}) {
        SCOPED_TRACE(::testing::Message() << threads << " threads, n " << n << ", grain " << grain);
        std::vector<std::atomic<int>> hits(n);
        std::atomic<size_t> n_ran{0};
        pool.parallel_for(
            n,
            [&](size_t b, size_t e) {
              ran[n_ran.fetch_add(1)] = {b, e};
              for (size_t i = b; i < e; ++i) hits[i].fetch_add(1);
            },
            grain);
        const size_t count = ThreadPool::chunk_count(n, grain, threads);
        ASSERT_EQ(n_ran.load(), count);
        std::sort(ran.begin(), ran.begin() + static_cast<long>(count));
        for (size_t c = 0; c < count; ++c) {
          EXPECT_EQ(ran[c], ThreadPool::chunk(n, grain, count, c)) << c;
          EXPECT_TRUE(ran[c].first % grain == 0) << c;
          EXPECT_TRUE(ran[c].second == n || ran[c].second % grain == 0) << c;
        }
        for (size_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << i;
      }
    }
  }
}

// Work stealing: the thread that gets chunk 0 is held there until every other chunk is done, which
// only happens if the other threads take all the rest (with a fixed share per thread it would wait
// out the deadline). Counts the chunks each thread ran.
TEST(ThreadPool, ABlockedChunkLeavesAllTheOthersToTheOtherThreads) {
  using Clock = std::chrono::steady_clock;
  for (size_t threads : {2, 3, 4}) {
    SCOPED_TRACE(::testing::Message() << threads << " threads");
    ThreadPool pool(threads);
    const size_t n = 4096, grain = 16;
    const size_t count = ThreadPool::chunk_count(n, grain, threads);
    ASSERT_EQ(count, threads * ThreadPool::kChunksPerThread);
    std::vector<std::thread::id> ran_by(count);
    std::atomic<size_t> others_done{0};
    std::atomic<bool> timed_out{false};
    pool.parallel_for(
        n,
        [&](size_t b, size_t e) {
          size_t c = 0;
          while (ThreadPool::chunk(n, grain, count, c).first != b) ++c;
          ASSERT_EQ(ThreadPool::chunk(n, grain, count, c).second, e);
          ran_by[c] = std::this_thread::get_id();
          if (c != 0) {
            others_done.fetch_add(1);
            return;
          }
          const auto deadline = Clock::now() + std::chrono::seconds(10);
          while (others_done.load() < count - 1) {
            if (Clock::now() > deadline) {
              timed_out = true;
              return;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
          }
        },
        grain);
    EXPECT_FALSE(timed_out.load()) << "the other chunks waited for the blocked thread";
    size_t blocked_ran = 0;
    for (size_t c = 0; c < count; ++c) blocked_ran += ran_by[c] == ran_by[0] ? 1 : 0;
    EXPECT_EQ(blocked_ran, 1u) << "chunks run by the blocked thread, of " << count;
  }
}

// Each chunk index has its own scratch: chunk 0 keeps its bytes while the other thread runs every
// other chunk, and no two chunks got the same buffer.
TEST(ThreadPool, ConcurrentChunksHaveTheirOwnScratch) {
  using Clock = std::chrono::steady_clock;
  ThreadPool pool(2);
  const size_t n = 4096, grain = 16;
  const size_t count = ThreadPool::chunk_count(n, grain, 2);
  ASSERT_GT(count, 2u);
  std::vector<void*> buffers(count);
  std::atomic<size_t> others_done{0};
  std::atomic<bool> clobbered{false};
  pool.parallel_for(
      n,
      [&](size_t b, size_t) {
        size_t c = 0;
        while (ThreadPool::chunk(n, grain, count, c).first != b) ++c;
        auto* mark = static_cast<size_t*>(detail::thread_scratch(64, 0));
        buffers[c] = mark;
        *mark = c;
        if (c != 0) {
          others_done.fetch_add(1);
          return;
        }
        const auto deadline = Clock::now() + std::chrono::seconds(10);
        while (others_done.load() < count - 1 && Clock::now() < deadline) {
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        if (*mark != 0) clobbered = true;
      },
      grain);
  EXPECT_FALSE(clobbered.load());
  std::sort(buffers.begin(), buffers.end());
  EXPECT_EQ(std::adjacent_find(buffers.begin(), buffers.end()), buffers.end());
}

TEST(ThreadPool, ParallelForVisitsEveryIndexOnceOnManyCalls) {
  for (size_t threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    std::vector<std::atomic<int>> hits(257);
    for (int round = 0; round < 200; ++round) {
      pool.parallel_for(hits.size(), [&](size_t b, size_t e) {
        for (size_t i = b; i < e; ++i) hits[i].fetch_add(1);
      });
    }
    for (auto& h : hits) ASSERT_EQ(h.load(), 200);
  }
}

// Scratch belongs to the chunk index being run, not the thread, so warm-up does not depend on
// which thread ran which chunk; outside a pool each thread has its own.
TEST(ScratchArena, ScopeRedirectsThreadScratchAndBuffersOnlyGrow) {
  ScratchArena arena;
  void* outside = detail::thread_scratch(64, 2);
  {
    const ScratchArena::Scope scope(&arena);
    void* inside = detail::thread_scratch(100, 2);
    EXPECT_EQ(inside, arena.get(100, 2));
    EXPECT_EQ(arena.get(50, 2), inside);  // smaller request: same buffer
    EXPECT_NE(inside, outside);
    EXPECT_NE(arena.get(100, 3), inside);  // slots are independent
  }
  EXPECT_EQ(detail::thread_scratch(64, 2), outside);
  const long before = g_allocations.load();
  arena.get(1 << 20, 2);  // larger: grows once
  EXPECT_EQ(g_allocations.load(), before + 1);
  arena.get(1 << 20, 2);
  EXPECT_EQ(g_allocations.load(), before + 1);
}

TEST(ThreadPool, ZeroThreadsIsAnError) {
  EXPECT_THROW(ThreadPool(0), Error);
}

// Outputs for 1, 2, 3 and 4 threads, compared byte for byte, for every available Isa. The sizes
// give more chunks than threads (chunk_count), so the chunks are claimed dynamically.
class ThreadCounts : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    SM_REQUIRE_ISA(GetParam());
    previous_ = active_isa();
    set_active_isa(GetParam());
  }
  void TearDown() override { set_active_isa(previous_); }
  Isa previous_ = Isa::kScalar;
};

TEST_P(ThreadCounts, MatvecAndMatmulAreBitIdentical) {
  std::mt19937 rng(20);
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (size_t rows : {203, 1003}) {  // 13 grains (3-4 chunks), 63 (8-15 chunks)
      TestMatrix w(rng, dtype, rows, 301, 1);
      const size_t n = 7;
      const auto x = random_floats(rng, n * 301);
      std::vector<std::vector<float>> mv, mm;
      for (size_t threads : {1, 2, 3, 4}) {
        ThreadPool pool(threads);
        std::vector<float> y(rows, 1.0f), ys(n * rows, 1.0f);
        matvec(pool, w.view(), x.data(), y.data(), {.scale = 0.9f, .accumulate = true});
        matmul(pool, w.view(), x.data(), n, ys.data());
        mv.push_back(y);
        mm.push_back(ys);
      }
      for (size_t i = 1; i < mv.size(); ++i) {
        EXPECT_EQ(0, std::memcmp(mv[0].data(), mv[i].data(), mv[0].size() * 4))
            << dtype_name(dtype);
        EXPECT_EQ(0, std::memcmp(mm[0].data(), mm[i].data(), mm[0].size() * 4))
            << dtype_name(dtype);
      }
    }
  }
}

TEST_P(ThreadCounts, MatvecBatchEqualsSeparateMatvecs) {
  std::mt19937 rng(23);
  TestMatrix a(rng, DType::kBF16, 37, 100, 1), b(rng, DType::kF32, 5, 33, 0),
      c(rng, DType::kF16, 640, 64, 2);
  const auto x = random_floats(rng, 100);
  for (size_t threads : {1, 2, 3, 4}) {
    ThreadPool pool(threads);
    std::vector<float> ya(37), yb(5, 2.0f), yc(640), ea(37), eb(5, 2.0f), ec(640);
    const MatvecJob jobs[] = {{a.view(), x.data(), ya.data(), {}},
                              {b.view(), x.data(), yb.data(), {.scale = 3.0f, .accumulate = true}},
                              {c.view(), x.data(), yc.data(), {}}};
    matvec_batch(pool, jobs, 3);
    matvec(pool, a.view(), x.data(), ea.data());
    matvec(pool, b.view(), x.data(), eb.data(), {.scale = 3.0f, .accumulate = true});
    matvec(pool, c.view(), x.data(), ec.data());
    EXPECT_EQ(ya, ea) << threads;
    EXPECT_EQ(yb, eb) << threads;
    EXPECT_EQ(yc, ec) << threads;
  }
}

TEST_P(ThreadCounts, AttentionAndPrefillAreBitIdenticalAndPrefillEqualsDecode) {
  std::mt19937 rng(21);
  const AttentionParams p = detail_params(6, 2, 48, 40);
  const size_t n_pos = 57, first = 50, n_q = n_pos - first;
  const auto k = random_floats(rng, n_pos * 2 * 48);
  const auto v = random_floats(rng, n_pos * 2 * 40);
  const auto q = random_floats(rng, n_q * 6 * 48, -3.0f, 3.0f);
  std::vector<std::vector<float>> prefill_runs;
  for (size_t threads : {1, 2, 3, 4}) {
    ThreadPool pool(threads);
    std::vector<float> out(n_q * 6 * 40);
    attention_prefill(pool, q.data(), 6 * 48, n_q, first, k.data(), v.data(), out.data(), 6 * 40,
                      p);
    prefill_runs.push_back(out);
    for (size_t i = 0; i < n_q; ++i) {
      std::vector<float> decode(6 * 40);
      attention(pool, q.data() + i * 6 * 48, k.data(), v.data(), first + i + 1, decode.data(), p);
      ASSERT_EQ(0, std::memcmp(decode.data(), out.data() + i * 6 * 40, decode.size() * 4))
          << "query " << i << " threads " << threads;
    }
  }
  for (size_t i = 1; i < prefill_runs.size(); ++i) EXPECT_EQ(prefill_runs[0], prefill_runs[i]);
}

TEST_P(ThreadCounts, NoAllocationAfterWarmUp) {
  std::mt19937 rng(22);
  ThreadPool pool(2);
  // 512 rows: 8 chunks, claimed by whichever thread is free.
  TestMatrix w(rng, DType::kBF16, 512, 200, 0);
  const auto x = random_floats(rng, 5 * 200);
  std::vector<float> y(5 * 512);
  const AttentionParams p = detail_params(4, 2, 32, 32);
  const auto kv = random_floats(rng, 40 * 2 * 32);
  std::vector<float> out(4 * 32), prefill_out(4 * 4 * 32);
  const MatvecJob jobs[] = {{w.view(), x.data(), y.data(), {}},
                            {w.view(), x.data(), y.data() + 512, {}}};
  auto run_all = [&] {
    matvec(pool, w.view(), x.data(), y.data());
    matvec_batch(pool, jobs, 2);
    matmul(pool, w.view(), x.data(), 5, y.data());
    attention(pool, x.data(), kv.data(), kv.data(), 40, out.data(), p);
    attention_prefill(pool, x.data(), 4 * 32, 4, 36, kv.data(), kv.data(), prefill_out.data(),
                      4 * 32, p);
    rmsnorm(x.data(), nullptr, y.data(), 64);
    softmax(y.data(), 64);
  };
  run_all();
  const long before = g_allocations.load();
  for (int i = 0; i < 3; ++i) run_all();
  EXPECT_EQ(g_allocations.load(), before);
}

INSTANTIATE_TEST_SUITE_P(Isas, ThreadCounts,
                         ::testing::Values(Isa::kScalar, Isa::kAvx2, Isa::kAvx512,
                                           Isa::kAvx512Bf16),
                         isa_param_name);

}  // namespace
}  // namespace steermoe::kernels::testing
