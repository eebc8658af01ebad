// Decode matvec on quantized weights against the read-bandwidth floor of the bytes it reads.
// Run with --benchmark_format=json. One iteration = a pass of the AVX-512 (or AVX2) sum over a
// 256 MiB pool, then a pass of matvecs over the same pool cut into rows x cols matrices of the
// type, 1 thread; the passes alternate so load from elsewhere hits both alike. Counters (CPU time
// of the calling thread): read_cpu_bytes_per_second, matvec_cpu_bytes_per_second (stored bytes
// of the weights, scales included) and matvec_fraction_of_read (the goal: >= 0.9).
//
//   bench_quant --benchmark_format=json
//   bench_quant --benchmark_filter='/isa:1/'    # the AVX2 path only
#include <benchmark/benchmark.h>
#include <time.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench_common/read_sum.hpp"
#include "kernels/kernels.hpp"
#include "quant/quant.hpp"

namespace {

using namespace steermoe::kernels;
namespace quant = steermoe::quant;

constexpr size_t kPoolBytes = size_t{256} << 20;

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// Random bytes with every f16 scale field set to a small finite value (the numbers do not matter
// for speed, only that no NaN/denormal slows anything down).
// In 2 MiB pages, as the engine's weights are (read_sum.hpp, HugePageArray).
const steermoe::bench::HugePageArray<uint8_t>& pool(DType t) {
  static std::map<DType, std::unique_ptr<steermoe::bench::HugePageArray<uint8_t>>> pools;
  auto& pp = pools[t];
  if (pp) return *pp;
  pp = std::make_unique<steermoe::bench::HugePageArray<uint8_t>>(kPoolBytes);
  auto& p = *pp;
  std::mt19937_64 rng(static_cast<uint64_t>(t) + 1);
  for (size_t i = 0; i + 8 <= p.size(); i += 8) {
    const uint64_t v = rng();
    std::memcpy(p.data() + i, &v, 8);
  }
  const uint16_t h = quant::f32_to_f16(0.01f);
  const size_t bb = dtype_block_bytes(t);
  std::vector<size_t> offsets;
  switch (t) {
    case DType::kQ8_0:
    case DType::kQ4_0:
    case DType::kQ5_0:
      offsets = {0};
      break;
    case DType::kQ4_1:
    case DType::kQ5_1:
    case DType::kQ4_K:
    case DType::kQ5_K:
      offsets = {0, 2};
      break;
    case DType::kQ6_K:
      offsets = {208};
      break;
    case DType::kQ2_K:
      offsets = {80, 82};
      break;
    case DType::kQ3_K:
      offsets = {108};
      break;
    case DType::kBF16:
      for (size_t i = 0; i + 2 <= p.size(); i += 2) {
        const uint16_t b = f32_to_bf16(static_cast<float>(p[i]) / 256.0f - 0.5f);
        std::memcpy(p.data() + i, &b, 2);
      }
      break;
    case DType::kF8E4M3:
      for (auto& b : p) b &= 0xf7;  // no NaN codes
      break;
    default:
      break;
  }
  if (dtype_is_block(t)) {
    for (size_t b = 0; b + bb <= p.size(); b += bb) {
      for (size_t o : offsets) std::memcpy(p.data() + b + o, &h, 2);
    }
  }
  return p;
}

// Args: dtype (kernels::DType value), rows, cols, isa.
void BM_QuantMatvecVsRead(benchmark::State& state) {
  const auto t = static_cast<DType>(state.range(0));
  const auto rows = static_cast<size_t>(state.range(1));
  const auto cols = static_cast<size_t>(state.range(2));
  const auto isa = static_cast<Isa>(state.range(3));
  if (!isa_available(isa)) {
    state.SkipWithError("CPU lacks this instruction set");
    return;
  }
  set_active_isa(isa);
  const bool avx512 = isa_available(Isa::kAvx512);
  state.SetLabel(std::string(dtype_name(t)) + "/" + std::string(isa_name(isa)));
  const auto& w = pool(t);
  static std::vector<float> scales((rows + 127) / 128 * ((cols + 127) / 128) * 64, 0.01f);
  Matrix m{.data = nullptr, .dtype = t, .rows = rows, .cols = cols};
  if (t == DType::kF8E4M3) m.scales = scales.data();
  const size_t bytes = rows * row_bytes(t, cols);
  const size_t stored = stored_bytes(m);
  const size_t count = kPoolBytes / bytes;
  std::vector<float> x(cols, 0.5f), y(rows);
  for (size_t c = 0; c < cols; ++c) x[c] = static_cast<float>(c % 17) / 17.0f - 0.4f;
  ThreadPool pool1(1);
  double sum_seconds = 0.0, matvec_seconds = 0.0;
  for (auto _ : state) {
    // The floor: the faster of a plain and a prefetching read pass (read_sum.hpp).
    const auto* f = reinterpret_cast<const float*>(w.data());
    const size_t nf = count * bytes / sizeof(float);
    const double read_seconds =
        steermoe::bench::fastest_read_seconds(f, nf, avx512, thread_cpu_seconds);
    const double t1 = thread_cpu_seconds();
    for (size_t i = 0; i < count; ++i) {
      m.data = w.data() + i * bytes;
      matvec(pool1, m, x.data(), y.data());
      benchmark::DoNotOptimize(y.data());
    }
    sum_seconds += read_seconds;
    matvec_seconds += thread_cpu_seconds() - t1;
  }
  const double total = static_cast<double>(state.iterations() * count);
  state.counters["read_cpu_bytes_per_second"] = total * static_cast<double>(bytes) / sum_seconds;
  state.counters["matvec_cpu_bytes_per_second"] =
      total * static_cast<double>(stored) / matvec_seconds;
  // Scales of FP8 are <0.01% of the bytes; the fraction compares equal byte counts.
  state.counters["matvec_fraction_of_read"] = sum_seconds / matvec_seconds;
  state.counters["us_per_matvec"] = matvec_seconds / total * 1e6;
}

void args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"dtype", "rows", "cols", "isa"});
  for (DType t :
       {DType::kBF16, DType::kQ8_0, DType::kQ6_K, DType::kQ5_K, DType::kQ4_K, DType::kQ3_K,
        DType::kQ2_K, DType::kQ5_0, DType::kQ5_1, DType::kQ4_0, DType::kQ4_1, DType::kF8E4M3}) {
    for (Isa isa : {Isa::kAvx2, best_isa()}) {
      // OLMoE expert gate / up (1024 x 2048); down is 2048 x 1024.
      b->Args({static_cast<int>(t), 1024, 2048, static_cast<int>(isa)});
      if (isa == best_isa()) break;
    }
  }
  b->Args({static_cast<int>(DType::kQ4_K), 2048, 1024, static_cast<int>(best_isa())});
  b->Args({static_cast<int>(DType::kQ6_K), 2048, 1024, static_cast<int>(best_isa())});
  // BF16 decode on the generic paths too (`avx2`, and `avx512`: an AVX-512 CPU without BF16),
  // the shapes the loop above does not give them.
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512}) {
    if (isa == best_isa()) continue;
    const int shapes[][2] = {{1024, 2048}, {2048, 1024}, {2048, 2048}};
    for (const auto& rc : shapes) {
      if (isa == Isa::kAvx2 && rc[0] == 1024) continue;  // above
      b->Args({static_cast<int>(DType::kBF16), rc[0], rc[1], static_cast<int>(isa)});
    }
  }
  // The other shapes of a BF16 / Q8_0 decode: expert down, attention (2048 x 2048) and the
  // OLMoE output head (50304 x 2048: one matrix fills most of the pool).
  for (DType t : {DType::kBF16, DType::kQ8_0}) {
    b->Args({static_cast<int>(t), 2048, 1024, static_cast<int>(best_isa())});
    b->Args({static_cast<int>(t), 2048, 2048, static_cast<int>(best_isa())});
    b->Args({static_cast<int>(t), 50304, 2048, static_cast<int>(best_isa())});
  }
}
BENCHMARK(BM_QuantMatvecVsRead)->Apply(args)->Iterations(3)->Unit(benchmark::kMillisecond);

// Compute speed without memory: a 128 x 2048 matrix (144-272 KiB, L2-resident) times n inputs
// (n = 1: decode matvec; n > 1: the prefill matmul), 1 thread, CPU time. Counter
// weights_per_ns: weights x inputs per nanosecond. The decode kernels must be well above the
// memory floor's rate (bytes per ns / bytes per weight) for decode to be memory-bound.
// Args: dtype, n, isa.
void BM_QuantComputeL2(benchmark::State& state) {
  const auto t = static_cast<DType>(state.range(0));
  const auto n = static_cast<size_t>(state.range(1));
  const auto isa = static_cast<Isa>(state.range(2));
  if (!isa_available(isa)) {
    state.SkipWithError("CPU lacks this instruction set");
    return;
  }
  set_active_isa(isa);
  state.SetLabel(std::string(dtype_name(t)) + "/" + std::string(isa_name(isa)));
  const size_t rows = 128, cols = 2048;
  const Matrix m{.data = pool(t).data(), .dtype = t, .rows = rows, .cols = cols};
  std::vector<float> x(cols * n), y(rows * n);
  for (size_t c = 0; c < x.size(); ++c) x[c] = static_cast<float>(c % 17) / 17.0f - 0.4f;
  ThreadPool pool1(1);
  double seconds = 0.0;
  for (auto _ : state) {
    const double t0 = thread_cpu_seconds();
    if (n == 1) {
      matvec(pool1, m, x.data(), y.data());
    } else {
      matmul(pool1, m, x.data(), n, y.data());
    }
    seconds += thread_cpu_seconds() - t0;
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["weights_per_ns"] =
      static_cast<double>(state.iterations() * rows * cols * n) / (seconds * 1e9);
}

void compute_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"dtype", "n", "isa"});
  for (DType t :
       {DType::kBF16, DType::kQ8_0, DType::kQ6_K, DType::kQ5_K, DType::kQ4_K, DType::kQ3_K,
        DType::kQ2_K, DType::kQ5_1, DType::kQ5_0, DType::kQ4_1, DType::kQ4_0}) {
    for (int n : {1, 7, 8, 64}) {
      for (Isa isa : {Isa::kAvx2, best_isa()}) {
        b->Args({static_cast<int>(t), n, static_cast<int>(isa)});
      }
    }
  }
}
BENCHMARK(BM_QuantComputeL2)->Apply(compute_args)->MinTime(0.2);

// Threaded products on one OLMoE-1B-7B expert shape (1024 x 2048, the gate / up projection) of
// the type: decode (n = 1) and prefill (n = 8, 64) at 1 and 2 threads on the best Isa, wall time.
// ThreadPool hands out up to 4 chunks per thread, claimed by whichever thread is free (issue 24):
// compare 2 threads with 1 here, on a quiet machine. Counter weights_per_ns (weights x inputs).
//   bench_quant --benchmark_filter=QuantThreads
void BM_QuantThreads(benchmark::State& state) {
  const auto t = static_cast<DType>(state.range(0));
  const auto n = static_cast<size_t>(state.range(1));
  const auto threads = static_cast<size_t>(state.range(2));
  state.SetLabel(std::string(dtype_name(t)) + "/" + std::string(isa_name(active_isa())));
  const size_t rows = 1024, cols = 2048;
  const size_t bytes = rows * row_bytes(t, cols);
  const size_t count = kPoolBytes / bytes;  // matrices in the pool: each call reads a cold one
  Matrix m{.data = nullptr, .dtype = t, .rows = rows, .cols = cols};
  std::vector<float> x(cols * n), y(rows * n);
  for (size_t c = 0; c < x.size(); ++c) x[c] = static_cast<float>(c % 17) / 17.0f - 0.4f;
  ThreadPool threaded(threads);
  size_t i = 0;
  for (auto _ : state) {
    m.data = pool(t).data() + (i++ % count) * bytes;
    if (n == 1) {
      matvec(threaded, m, x.data(), y.data());
    } else {
      matmul(threaded, m, x.data(), n, y.data());
    }
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["weights_per_ns"] =
      benchmark::Counter(static_cast<double>(state.iterations() * rows * cols * n) * 1e-9,
                         benchmark::Counter::kIsRate);
}

void threads_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"dtype", "n", "threads"});
  for (DType t : {DType::kBF16, DType::kQ4_K, DType::kQ6_K}) {
    for (int n : {1, 8, 64}) {
      for (int threads : {1, 2}) b->Args({static_cast<int>(t), n, threads});
    }
  }
}
BENCHMARK(BM_QuantThreads)->Apply(threads_args)->MinTime(0.5)->UseRealTime();

// The quantizer (`steermoe quantize`, `make-model --type`): f32 rows of 2048 uniform values (the
// made models' weights) encoded as the type, 1 thread, CPU time. Counter weights_per_us.
void BM_QuantizeRows(benchmark::State& state) {
  const auto t = static_cast<quant::Type>(state.range(0));
  state.SetLabel(std::string(quant::name(t)));
  const size_t n = 64 * 2048;
  std::vector<float> x(n);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-0.05f, 0.05f);
  for (auto& v : x) v = dist(rng);
  std::vector<uint8_t> out(quant::bytes_for(t, n));
  double seconds = 0.0;
  for (auto _ : state) {
    const double t0 = thread_cpu_seconds();
    quant::quantize_row(t, x.data(), out.data(), n);
    seconds += thread_cpu_seconds() - t0;
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["weights_per_us"] = static_cast<double>(state.iterations() * n) / (seconds * 1e6);
}
BENCHMARK(BM_QuantizeRows)
    ->ArgName("type")
    ->Arg(static_cast<int>(quant::Type::kQ8_0))
    ->Arg(static_cast<int>(quant::Type::kQ4_K))
    ->Arg(static_cast<int>(quant::Type::kQ5_K))
    ->Arg(static_cast<int>(quant::Type::kQ6_K))
    ->Arg(static_cast<int>(quant::Type::kQ2_K))
    ->Arg(static_cast<int>(quant::Type::kQ3_K))
    ->MinTime(0.3);

}  // namespace

BENCHMARK_MAIN();
