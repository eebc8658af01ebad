// Kernel throughput at the shapes decode spends its time on, and the machine's read bandwidth
// (the floor decode is measured against). Run with --benchmark_format=json; every benchmark reports
// bytes_per_second for the bytes it must read from memory.
//
//   bench_kernels --benchmark_filter='ReadBandwidth|MatvecBF16'    # bandwidth floor vs matvec
//   bench_kernels --benchmark_filter='DeltaRuleStep|GatedDeltaNet' # Gated DeltaNet, per Isa
//   bench_kernels --benchmark_filter=GdnPrefill                     # recurrent vs chunked prefill
#include <benchmark/benchmark.h>
#include <time.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <vector>

#include "bench_common/read_sum.hpp"
#include "kernels/kernels.hpp"
#include "kernels/linear_attention.hpp"

namespace {

using namespace steermoe::kernels;

ThreadPool& pool_of(size_t threads) {
  static std::map<size_t, std::unique_ptr<ThreadPool>> pools;
  auto& p = pools[threads];
  if (!p) p = std::make_unique<ThreadPool>(threads);
  return *p;
}

// Random values in [-1, 1) (as bf16 bits for uint16_t), the same for the same (n, which).
template <typename T, typename It>
void fill_random(It begin, It end, size_t n, int which) {
  std::mt19937 rng(static_cast<unsigned>(n + which));
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (It v = begin; v != end; ++v) {
    if constexpr (std::is_same_v<T, float>) {
      *v = dist(rng);
    } else {
      *v = f32_to_bf16(dist(rng));
    }
  }
}

// Buffers are filled (touched) once and reused across benchmarks of the same size.
template <typename T>
std::vector<T>& buffer(size_t n, int which) {
  static std::map<std::pair<size_t, int>, std::vector<T>> buffers;
  auto& b = buffers[{n, which}];
  if (b.size() != n) {
    b.resize(n);
    fill_random<T>(b.begin(), b.end(), n, which);
  }
  return b;
}

// The weight pools and the read probe live in 2 MiB pages, as the engine's weights do
// (read_sum.hpp, HugePageArray), filled as buffer() fills.
template <typename T>
steermoe::bench::HugePageArray<T>& huge_buffer(size_t n, int which) {
  static std::map<std::pair<size_t, int>, std::unique_ptr<steermoe::bench::HugePageArray<T>>> all;
  auto& b = all[{n, which}];
  if (!b) {
    b = std::make_unique<steermoe::bench::HugePageArray<T>>(n);
    fill_random<T>(b->begin(), b->end(), n, which);
  }
  return *b;
}

// Main-thread CPU time, for a second rate counter: on a shared, oversubscribed machine real time
// includes time the benchmark was not running at all, so 1-thread rates are better read from
// "cpu_bytes_per_second" (bytes / CPU seconds of the calling thread). With 2 threads the caller's
// CPU time covers only its own share, so read real-time bytes_per_second there (quiet machine).
double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

void set_cpu_rate(benchmark::State& state, double cpu_seconds, double bytes) {
  state.counters["cpu_bytes_per_second"] = cpu_seconds > 0 ? bytes / cpu_seconds : 0.0;
}

bool select_isa(benchmark::State& state, Isa isa) {
  if (!isa_available(isa)) {
    state.SkipWithError("CPU lacks this instruction set");
    return false;
  }
  set_active_isa(isa);
  state.SetLabel(std::string(isa_name(isa)));
  return true;
}

// ---- Read bandwidth: sum over a 1 GiB buffer ------------------------------------------------

constexpr size_t kBandwidthBytes = size_t{1} << 30;

// Args: simd (0 = AVX2, 1 = AVX-512), threads.
void BM_ReadBandwidth(benchmark::State& state) {
  const bool avx512 = state.range(0) == 1;
  if (!isa_available(avx512 ? Isa::kAvx512 : Isa::kAvx2)) {
    state.SkipWithError("CPU lacks this instruction set");
    return;
  }
  const auto threads = static_cast<size_t>(state.range(1));
  auto& data = huge_buffer<float>(kBandwidthBytes / sizeof(float), 0);
  ThreadPool& pool = pool_of(threads);
  const double cpu_start = thread_cpu_seconds();
  for (auto _ : state) {
    pool.parallel_for(
        data.size(),
        [&](size_t b, size_t e) {
          const float s = avx512 ? steermoe::bench::read_sum_avx512(data.data() + b, e - b)
                                 : steermoe::bench::read_sum_avx2(data.data() + b, e - b);
          benchmark::DoNotOptimize(s);
        },
        4096);
  }
  state.SetLabel(avx512 ? "avx512" : "avx2");
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) *
                          static_cast<int64_t>(kBandwidthBytes));
  set_cpu_rate(state, thread_cpu_seconds() - cpu_start,
               static_cast<double>(state.iterations()) * static_cast<double>(kBandwidthBytes));
}
BENCHMARK(BM_ReadBandwidth)
    ->ArgNames({"avx512", "threads"})
    ->Args({1, 1})
    ->Args({1, 2})
    ->Args({0, 1})
    ->Args({0, 2})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// ---- Matvec over BF16 experts --------------------------------------------------------------

// Enough distinct matrices (>= 512 MiB) that each call streams its weights from DRAM, as decode
// does when it visits a new expert.
constexpr size_t kWeightPoolBytes = size_t{512} << 20;

// Args: rows, cols, isa, threads, dtype (0 f32, 1 bf16).
void BM_Matvec(benchmark::State& state) {
  const auto rows = static_cast<size_t>(state.range(0));
  const auto cols = static_cast<size_t>(state.range(1));
  if (!select_isa(state, static_cast<Isa>(state.range(2)))) return;
  const auto threads = static_cast<size_t>(state.range(3));
  const DType dtype = state.range(4) == 0 ? DType::kF32 : DType::kBF16;
  const size_t matrix_bytes = rows * cols * dtype_size(dtype);
  const size_t count = std::max<size_t>(1, kWeightPoolBytes / matrix_bytes);
  auto& weights = huge_buffer<uint16_t>(kWeightPoolBytes / 2, 1);
  const auto& x = buffer<float>(cols, 2);
  std::vector<float> y(rows);
  ThreadPool& pool = pool_of(threads);
  size_t next = 0;
  const double cpu_start = thread_cpu_seconds();
  for (auto _ : state) {
    const Matrix w{.data = reinterpret_cast<const char*>(weights.data()) + next * matrix_bytes,
                   .dtype = dtype,
                   .rows = rows,
                   .cols = cols};
    matvec(pool, w, x.data(), y.data());
    benchmark::DoNotOptimize(y.data());
    next = (next + 1) % count;
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * matrix_bytes));
  set_cpu_rate(state, thread_cpu_seconds() - cpu_start,
               static_cast<double>(state.iterations() * matrix_bytes));
}

void matvec_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"rows", "cols", "isa", "threads", "bf16"});
  for (int threads : {1, 2}) {
    for (auto shape : {std::pair{1024, 2048}, std::pair{2048, 1024}}) {
      for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Bf16}) {
        if (isa == Isa::kScalar && threads == 2) continue;
        b->Args({shape.first, shape.second, static_cast<int>(isa), threads, 1});
      }
    }
  }
  // An f32 matrix (router, norms-sized outputs) for comparison.
  b->Args({1024, 2048, static_cast<int>(Isa::kAvx512), 1, 0});
}
BENCHMARK(BM_Matvec)->Apply(matvec_args)->Unit(benchmark::kMicrosecond)->UseRealTime();

// ---- Matvec streaming vs read bandwidth, side by side --------------------------------------

// One iteration = a pass of the AVX-512 sum over the 512 MiB weight pool, then a pass of BF16
// matvecs over the same pool cut into rows x cols matrices, on 1 thread with the best Isa. The
// passes alternate, so load from elsewhere hits both alike; counters give each rate (CPU time) and
// matvec_fraction_of_read = matvec rate / sum rate, the figure the decode goal (>= 95% of the
// bandwidth floor) depends on. Args: rows, cols.
void BM_MatvecVsReadBandwidth(benchmark::State& state) {
  const auto rows = static_cast<size_t>(state.range(0));
  const auto cols = static_cast<size_t>(state.range(1));
  if (!isa_available(Isa::kAvx512)) {
    state.SkipWithError("CPU lacks AVX-512");
    return;
  }
  set_active_isa(best_isa());
  select_isa_from_env();  // STEERMOE_KERNELS: another path of this CPU
  state.SetLabel(std::string(isa_name(active_isa())));
  auto& weights = huge_buffer<uint16_t>(kWeightPoolBytes / 2, 1);
  const auto& x = buffer<float>(cols, 2);
  std::vector<float> y(rows);
  ThreadPool& pool = pool_of(1);
  const size_t matrix_bytes = rows * cols * 2;
  const size_t count = kWeightPoolBytes / matrix_bytes;
  double sum_seconds = 0.0, matvec_seconds = 0.0;
  for (auto _ : state) {
    // The floor: the faster of a plain and a prefetching read pass (read_sum.hpp).
    const double read_seconds = steermoe::bench::fastest_read_seconds(
        reinterpret_cast<const float*>(weights.data()), count * matrix_bytes / sizeof(float),
        /*avx512=*/true, thread_cpu_seconds);
    const double t1 = thread_cpu_seconds();
    for (size_t m = 0; m < count; ++m) {
      const Matrix w{.data = reinterpret_cast<const char*>(weights.data()) + m * matrix_bytes,
                     .dtype = DType::kBF16,
                     .rows = rows,
                     .cols = cols};
      matvec(pool, w, x.data(), y.data());
      benchmark::DoNotOptimize(y.data());
    }
    sum_seconds += read_seconds;
    matvec_seconds += thread_cpu_seconds() - t1;
  }
  const double bytes = static_cast<double>(state.iterations() * count * matrix_bytes);
  state.counters["read_cpu_bytes_per_second"] = bytes / sum_seconds;
  state.counters["matvec_cpu_bytes_per_second"] = bytes / matvec_seconds;
  state.counters["matvec_fraction_of_read"] = sum_seconds / matvec_seconds;
}
BENCHMARK(BM_MatvecVsReadBandwidth)
    ->ArgNames({"rows", "cols"})
    ->Args({1024, 2048})  // OLMoE expert gate / up
    ->Args({2048, 1024})  // OLMoE expert down
    ->Iterations(4)
    ->Unit(benchmark::kMillisecond);

// ---- Prefill product: n tokens through one expert ------------------------------------------

// Args: n, isa, threads. Reports weight bytes/s and flops (items = multiply-adds).
void BM_MatmulBF16(benchmark::State& state) {
  const auto n = static_cast<size_t>(state.range(0));
  if (!select_isa(state, static_cast<Isa>(state.range(1)))) return;
  const auto threads = static_cast<size_t>(state.range(2));
  const size_t rows = 1024, cols = 2048;
  auto& weights = buffer<uint16_t>(rows * cols, 3);
  const auto& x = buffer<float>(n * cols, 4);
  std::vector<float> y(n * rows);
  ThreadPool& pool = pool_of(threads);
  const Matrix w{.data = weights.data(), .dtype = DType::kBF16, .rows = rows, .cols = cols};
  const double cpu_start = thread_cpu_seconds();
  for (auto _ : state) {
    matmul(pool, w, x.data(), n, y.data());
    benchmark::DoNotOptimize(y.data());
  }
  const double cpu_seconds = thread_cpu_seconds() - cpu_start;
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * rows * cols * 2));
  set_cpu_rate(state, cpu_seconds, static_cast<double>(state.iterations() * rows * cols * 2));
  state.counters["cpu_GMAC/s"] =
      static_cast<double>(state.iterations() * rows * cols * n) * 1e-9 / cpu_seconds;
  state.counters["GMAC/s"] =
      benchmark::Counter(static_cast<double>(state.iterations() * rows * cols * n) * 1e-9,
                         benchmark::Counter::kIsRate);
}
BENCHMARK(BM_MatmulBF16)
    ->ArgNames({"n", "isa", "threads"})
    ->Args({64, static_cast<int>(Isa::kAvx512), 1})
    ->Args({64, static_cast<int>(Isa::kAvx512Bf16), 1})
    ->Args({64, static_cast<int>(Isa::kAvx512Bf16), 2})
    ->Args({256, static_cast<int>(Isa::kAvx512Bf16), 1})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// ---- Attention over an f32 KV cache ---------------------------------------------------------

// Args: n_heads, n_kv_heads, head_dim_k, head_dim_v, n_pos, threads. Bytes = the K and V read.
void BM_Attention(benchmark::State& state) {
  AttentionParams p;
  p.n_heads = static_cast<size_t>(state.range(0));
  p.n_kv_heads = static_cast<size_t>(state.range(1));
  p.head_dim_k = static_cast<size_t>(state.range(2));
  p.head_dim_v = static_cast<size_t>(state.range(3));
  p.scale = 1.0f / std::sqrt(static_cast<float>(p.head_dim_k));
  const auto n_pos = static_cast<size_t>(state.range(4));
  const auto threads = static_cast<size_t>(state.range(5));
  set_active_isa(best_isa());
  state.SetLabel(std::string(isa_name(best_isa())));
  const auto& q = buffer<float>(p.n_heads * p.head_dim_k, 5);
  const auto& k = buffer<float>(n_pos * p.n_kv_heads * p.head_dim_k, 6);
  const auto& v = buffer<float>(n_pos * p.n_kv_heads * p.head_dim_v, 7);
  std::vector<float> out(p.n_heads * p.head_dim_v);
  ThreadPool& pool = pool_of(threads);
  const double cpu_start = thread_cpu_seconds();
  for (auto _ : state) {
    attention(pool, q.data(), k.data(), v.data(), n_pos, out.data(), p);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * (k.size() + v.size()) * 4));
  set_cpu_rate(state, thread_cpu_seconds() - cpu_start,
               static_cast<double>(state.iterations() * (k.size() + v.size()) * 4));
}
BENCHMARK(BM_Attention)
    ->ArgNames({"heads", "kv_heads", "dk", "dv", "n_pos", "threads"})
    ->Args({16, 16, 128, 128, 512, 1})   // OLMoE
    ->Args({16, 16, 128, 128, 4096, 1})  // OLMoE, long context
    ->Args({16, 16, 128, 128, 4096, 2})
    ->Args({32, 4, 128, 128, 4096, 1})   // Qwen3-MoE GQA
    ->Args({16, 16, 192, 128, 4096, 1})  // MLA (Moonlight)
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

// ---- Gated DeltaNet -----------------------------------------------------------------------------

// One delta-rule step of `heads` heads of dk x dv states, one after another, as one token of one
// layer does (heads 32: the Qwen3.6-35B-A3B / Qwen3-Next-80B layer, 2 MiB of state; heads 960:
// its 30 Gated DeltaNet layers, 60 MiB, so every state comes from DRAM as in decode; heads 1:
// one 64 KiB state, in L2). Args: dk, dv, heads, isa. Bytes = the states read and written once.
void BM_DeltaRuleStep(benchmark::State& state) {
  const auto dk = static_cast<size_t>(state.range(0));
  const auto dv = static_cast<size_t>(state.range(1));
  const auto heads = static_cast<size_t>(state.range(2));
  if (!select_isa(state, static_cast<Isa>(state.range(3)))) return;
  const KernelTable& kt = kernel_table(active_isa());
  std::vector<float> s(heads * dk * dv);
  {
    const auto& init = buffer<float>(dk * dv, 15);
    for (size_t h = 0; h < heads; ++h) std::copy(init.begin(), init.end(), &s[h * dk * dv]);
  }
  std::vector<float> q = buffer<float>(dk, 16), k = buffer<float>(dk, 17);
  const auto& v = buffer<float>(dv, 18);
  kt.l2norm(q.data(), dk, 1e-6f);
  kt.l2norm(k.data(), dk, 1e-6f);
  std::vector<float> out(dv);
  const double bytes = static_cast<double>(heads * dk * dv * sizeof(float) * 2);
  const double cpu_start = thread_cpu_seconds();
  for (auto _ : state) {
    for (size_t h = 0; h < heads; ++h) {
      // g = 0, beta = 0: the state stays bounded however many iterations run.
      kt.delta_rule_step(&s[h * dk * dv], q.data(), k.data(), v.data(), 0.0f, 0.0f, dk, dv,
                         out.data());
      benchmark::DoNotOptimize(out.data());
    }
  }
  state.SetBytesProcessed(static_cast<int64_t>(static_cast<double>(state.iterations()) * bytes));
  set_cpu_rate(state, thread_cpu_seconds() - cpu_start,
               static_cast<double>(state.iterations()) * bytes);
}

void delta_rule_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"dk", "dv", "heads", "isa"});
  for (int heads : {1, 32, 960}) {
    for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
      b->Args({128, 128, heads, static_cast<int>(isa)});
    }
  }
}
BENCHMARK(BM_DeltaRuleStep)->Apply(delta_rule_args)->Unit(benchmark::kMicrosecond);

// One token of one layer. Args: k_heads, v_heads, dk, dv, conv kernel, isa. Conv over 2 * key +
// value channels, L2 norms of q and k, the delta rule of every value head on its [dk][dv] state,
// the gated RMSNorm. Bytes = the recurrent state read and written once (2 MiB per layer at the
// Qwen3.6 shape).
void BM_GatedDeltaNetToken(benchmark::State& state) {
  const auto nk = static_cast<size_t>(state.range(0));
  const auto nv = static_cast<size_t>(state.range(1));
  const auto dk = static_cast<size_t>(state.range(2));
  const auto dv = static_cast<size_t>(state.range(3));
  const auto K = static_cast<size_t>(state.range(4));
  if (!select_isa(state, static_cast<Isa>(state.range(5)))) return;
  const size_t channels = 2 * nk * dk + nv * dv;
  const auto& w = buffer<float>(channels * K, 11);
  const auto& x0 = buffer<float>(channels, 12);
  const auto& z = buffer<float>(nv * dv, 13);
  const auto& norm = buffer<float>(dv, 14);
  std::vector<float> conv_state(channels * (K - 1), 0.0f), x(channels), out(nv * dv);
  std::vector<float> s(nv * dk * dv, 0.0f);
  for (auto _ : state) {
    std::copy(x0.begin(), x0.end(), x.begin());
    conv1d_silu_step(conv_state.data(), x.data(), w.data(), channels, K, x.data());
    for (size_t h = 0; h < 2 * nk; ++h) l2norm(&x[h * dk], dk, 1e-6f);
    for (size_t h = 0; h < nv; ++h) {
      const size_t kh = h / (nv / nk);
      delta_rule_step(&s[h * dk * dv], &x[kh * dk], &x[nk * dk + kh * dk], &x[2 * nk * dk + h * dv],
                      -0.1f, 0.5f, dk, dv, &out[h * dv]);
      rmsnorm_gated(&out[h * dv], norm.data(), &z[h * dv], &out[h * dv], dv, 1e-6f);
    }
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * s.size() * 4 * 2));
}
void gated_deltanet_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"k_heads", "v_heads", "dk", "dv", "conv", "isa"});
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    b->Args({16, 32, 128, 128, 4, static_cast<int>(isa)});  // Qwen3.6-35B-A3B / Qwen3-Next-80B
  }
}
BENCHMARK(BM_GatedDeltaNetToken)->Apply(gated_deltanet_args)->Unit(benchmark::kMicrosecond);

// A batched prefill of n tokens through one Gated DeltaNet layer's recurrent part, as
// CpuOps::delta_rule runs it with --gdn-prefill recurrent or chunked (the active Isa, the best
// this CPU has), at the Qwen3.6-35B-A3B / Qwen3-Next-80B linear layer (16 key heads, 32 value
// heads, dk = dv = 128, conv 4). Args: n, threads, chunk (0 = recurrent), whole:
//   whole 1: the op: conv + SiLU and the q / k norms token by token (one thread, as CpuOps),
//     then the value heads split over `threads` threads, each head's delta rule and gated
//     RMSNorm (recurrent: a parallel_for per token, one delta_rule_step per head, as
//     CpuOps::delta_rule_token; chunked: one delta_rule_chunked call of n tokens per head);
//   whole 0: the delta rule alone (the part the option changes), on inputs convolved once.
// items_per_second = prompt tokens per second. The inputs are restored outside the timed region;
// the state carries across iterations with ordinary gates (g -0.1, beta 0.5), so it stays bounded.
void BM_GdnPrefill(benchmark::State& state) {
  const auto n = static_cast<size_t>(state.range(0));
  const auto threads = static_cast<size_t>(state.range(1));
  const auto chunk = static_cast<size_t>(state.range(2));
  const bool whole = state.range(3) != 0;
  constexpr size_t nk = 16, nv = 32, dk = 128, dv = 128, K = 4;
  const size_t kd = nk * dk, channels = 2 * kd + nv * dv, vd = nv * dv;
  const auto& w = buffer<float>(channels * K, 21);
  const auto& x0 = buffer<float>(n * channels, 22);
  const auto& z = buffer<float>(n * vd, 23);
  const auto& norm = buffer<float>(dv, 24);
  std::vector<float> conv_state(channels * (K - 1), 0.0f), x(x0), out(n * vd);
  std::vector<float> s(nv * dk * dv, 0.0f), g(n * nv, -0.1f), beta(n * nv, 0.5f);
  ThreadPool& pool = pool_of(threads);
  const float sqrt_dk = std::sqrt(static_cast<float>(dk));
  auto inputs = [&] {
    for (size_t t = 0; t < n; ++t) {
      float* xt = &x[t * channels];
      conv1d_silu_step(conv_state.data(), xt, w.data(), channels, K, xt);
      for (size_t h = 0; h < 2 * nk; ++h) l2norm(&xt[h * dk], dk, 1e-6f);
      for (size_t i = 0; i < kd; ++i) xt[i] /= sqrt_dk;
    }
  };
  if (!whole) inputs();
  const DeltaRuleChunkParams p{.n = n,
                               .dk = dk,
                               .dv = dv,
                               .chunk = std::max<size_t>(chunk, 1),
                               .qk_stride = channels,
                               .v_stride = channels,
                               .out_stride = vd,
                               .gate_stride = nv};
  for (auto _ : state) {
    if (whole) {
      state.PauseTiming();
      std::copy(x0.begin(), x0.end(), x.begin());
      state.ResumeTiming();
      inputs();
    }
    if (chunk == 0) {
      for (size_t t = 0; t < n; ++t) {
        const float* xt = &x[t * channels];
        float* ot = &out[t * vd];
        pool.parallel_for(nv, [&](size_t begin, size_t end) {
          for (size_t h = begin; h < end; ++h) {
            const size_t kh = h / (nv / nk);
            delta_rule_step(&s[h * dk * dv], &xt[kh * dk], &xt[kd + kh * dk], &xt[2 * kd + h * dv],
                            g[t * nv + h], beta[t * nv + h], dk, dv, &ot[h * dv]);
            if (whole)
              rmsnorm_gated(&ot[h * dv], norm.data(), &z[t * vd + h * dv], &ot[h * dv], dv, 1e-6f);
          }
        });
      }
    } else {
      pool.parallel_for(nv, [&](size_t begin, size_t end) {
        for (size_t h = begin; h < end; ++h) {
          const size_t kh = h / (nv / nk);
          delta_rule_chunked(&s[h * dk * dv], &x[kh * dk], &x[kd + kh * dk], &x[2 * kd + h * dv],
                             &g[h], &beta[h], &out[h * dv], p);
          for (size_t t = 0; t < n && whole; ++t)
            rmsnorm_gated(&out[t * vd + h * dv], norm.data(), &z[t * vd + h * dv],
                          &out[t * vd + h * dv], dv, 1e-6f);
        }
      });
    }
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * n));
}
void gdn_prefill_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"n", "threads", "chunk", "whole"});
  for (int whole : {0, 1}) {
    for (int n : {128, 512}) {
      for (int threads : {1, 2}) {
        for (int chunk : {0, 16, 32, 64}) b->Args({n, threads, chunk, whole});
      }
    }
  }
}
BENCHMARK(BM_GdnPrefill)->Apply(gdn_prefill_args)->Unit(benchmark::kMillisecond)->UseRealTime();

// ---- Thread pool synchronisation cost -----------------------------------------------------------

// An empty parallel_for: the fixed cost every threaded kernel call pays (decode makes hundreds of
// calls per token, so this times the call count is the threading overhead per token).
void BM_ParallelForOverhead(benchmark::State& state) {
  ThreadPool& pool = pool_of(static_cast<size_t>(state.range(0)));
  std::vector<size_t> sink(64);
  for (auto _ : state) {
    pool.parallel_for(64, [&](size_t b, size_t e) { sink[b] = e; });
    benchmark::DoNotOptimize(sink.data());
  }
}
BENCHMARK(BM_ParallelForOverhead)->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
