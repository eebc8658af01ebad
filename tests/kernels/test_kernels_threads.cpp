// Thread pool behaviour, bit-identity of the threaded kernels across thread counts, prefill vs
// decode identity, and no allocation per call after warm-up.
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>

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

TEST(ThreadPool, ChunksPartitionTheRangeAtGrainBoundaries) {
  for (size_t threads : {1, 2, 3, 7}) {
    for (size_t n : {0, 1, 5, 16, 100, 1023}) {
      for (size_t grain : {1, 4, 16}) {
        size_t expected_begin = 0;
        for (size_t t = 0; t < threads; ++t) {
          const auto [b, e] = ThreadPool::chunk(n, grain, threads, t);
          EXPECT_EQ(b, expected_begin);
          EXPECT_LE(b, e);
          if (e < n) {
            EXPECT_EQ(e % grain, 0u);
          }
          expected_begin = e;
        }
        EXPECT_EQ(expected_begin, n) << threads << " " << n << " " << grain;
      }
    }
  }
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

// Scratch belongs to the chunk being run, not the thread, so warm-up does not depend on which
// thread ran which chunk; outside a pool each thread has its own.
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

// Outputs for 1, 2 and 3 threads, compared byte for byte, for every available Isa.
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
    TestMatrix w(rng, dtype, 203, 301, 1);
    const size_t n = 7;
    const auto x = random_floats(rng, n * 301);
    std::vector<std::vector<float>> mv, mm;
    for (size_t threads : {1, 2, 3}) {
      ThreadPool pool(threads);
      std::vector<float> y(203, 1.0f), ys(n * 203, 1.0f);
      matvec(pool, w.view(), x.data(), y.data(), {.scale = 0.9f, .accumulate = true});
      matmul(pool, w.view(), x.data(), n, ys.data());
      mv.push_back(y);
      mm.push_back(ys);
    }
    for (size_t i = 1; i < mv.size(); ++i) {
      EXPECT_EQ(0, std::memcmp(mv[0].data(), mv[i].data(), mv[0].size() * 4)) << dtype_name(dtype);
      EXPECT_EQ(0, std::memcmp(mm[0].data(), mm[i].data(), mm[0].size() * 4)) << dtype_name(dtype);
    }
  }
}

TEST_P(ThreadCounts, MatvecBatchEqualsSeparateMatvecs) {
  std::mt19937 rng(23);
  TestMatrix a(rng, DType::kBF16, 37, 100, 1), b(rng, DType::kF32, 5, 33, 0),
      c(rng, DType::kF16, 64, 64, 2);
  const auto x = random_floats(rng, 100);
  for (size_t threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    std::vector<float> ya(37), yb(5, 2.0f), yc(64), ea(37), eb(5, 2.0f), ec(64);
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
  for (size_t threads : {1, 2, 3}) {
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
  TestMatrix w(rng, DType::kBF16, 64, 200, 0);
  const auto x = random_floats(rng, 5 * 200);
  std::vector<float> y(5 * 64);
  const AttentionParams p = detail_params(4, 2, 32, 32);
  const auto kv = random_floats(rng, 40 * 2 * 32);
  std::vector<float> out(4 * 32);
  const MatvecJob jobs[] = {{w.view(), x.data(), y.data(), {}},
                            {w.view(), x.data(), y.data() + 64, {}}};
  auto run_all = [&] {
    matvec(pool, w.view(), x.data(), y.data());
    matvec_batch(pool, jobs, 2);
    matmul(pool, w.view(), x.data(), 5, y.data());
    attention(pool, x.data(), kv.data(), kv.data(), 40, out.data(), p);
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
