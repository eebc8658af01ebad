// The read-bandwidth probe shared by the benchmarks: sums a float buffer with four independent
// accumulators, so the loop is bound by memory reads, not by the add latency. Two passes count:
// plain loads, and loads behind the decode kernels' two-stage software prefetch (into L2 4 KiB
// ahead, into L1 1 KiB ahead). A floor is the faster of the two: on an Intel Xeon (model 207) the
// prefetching pass reads 6-7% faster than the plain one, and a floor the kernels can beat would
// flatter them.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <new>
#include <span>
#include <thread>
#include <vector>

#include "common/huge_pages.hpp"

namespace steermoe::bench {

template <bool kPrefetch>
__attribute__((always_inline)) inline void read_sum_prefetch(const float* p) {
  if constexpr (kPrefetch) {
    const char* c = reinterpret_cast<const char*>(p);
    for (int line = 0; line < 256; line += 64) {
      _mm_prefetch(c + 4096 + line, _MM_HINT_T1);
      _mm_prefetch(c + 1024 + line, _MM_HINT_T0);
    }
  }
}

template <bool kPrefetch = false>
__attribute__((target("avx512f"))) inline float read_sum_avx512(const float* p, size_t n) {
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i + 64 <= n; i += 64) {
    read_sum_prefetch<kPrefetch>(p + i);
    a0 = _mm512_add_ps(a0, _mm512_loadu_ps(p + i));
    a1 = _mm512_add_ps(a1, _mm512_loadu_ps(p + i + 16));
    a2 = _mm512_add_ps(a2, _mm512_loadu_ps(p + i + 32));
    a3 = _mm512_add_ps(a3, _mm512_loadu_ps(p + i + 48));
  }
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, _mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
  float s = 0.0f;
  for (float v : lanes) s += v;
  return s;
}

template <bool kPrefetch = false>
__attribute__((target("avx2"))) inline float read_sum_avx2(const float* p, size_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i + 64 <= n; i += 64) {  // 256 bytes a step, as the AVX-512 pass
    read_sum_prefetch<kPrefetch>(p + i);
    for (size_t j = 0; j < 64; j += 32) {
      a0 = _mm256_add_ps(a0, _mm256_loadu_ps(p + i + j));
      a1 = _mm256_add_ps(a1, _mm256_loadu_ps(p + i + j + 8));
      a2 = _mm256_add_ps(a2, _mm256_loadu_ps(p + i + j + 16));
      a3 = _mm256_add_ps(a3, _mm256_loadu_ps(p + i + j + 24));
    }
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
  float s = 0.0f;
  for (float v : lanes) s += v;
  return s;
}

// One pass over p[0, n) (n a multiple of 64 is read whole), on the widest path the CPU has.
inline float read_sum(const float* p, size_t n, bool avx512, bool prefetch) {
  if (avx512) return prefetch ? read_sum_avx512<true>(p, n) : read_sum_avx512<false>(p, n);
  return prefetch ? read_sum_avx2<true>(p, n) : read_sum_avx2<false>(p, n);
}

// Seconds of the floor over p[0, n): the faster of a plain and a prefetching pass, each timed by
// `seconds` (a clock in seconds: a benchmark's thread CPU time, say).
template <class Seconds>
double fastest_read_seconds(const float* p, size_t n, bool avx512, Seconds seconds) {
  double best = 0.0;
  for (const bool prefetch : {false, true}) {
    const double t0 = seconds();
    volatile float sink = read_sum(p, n, avx512, prefetch);
    (void)sink;
    const double t = seconds() - t0;
    best = prefetch ? std::min(best, t) : t;
  }
  return best;
}

// `n` values of T set to `fill` in 2 MiB pages where the kernel gives them (transparent huge
// pages on request): the engine holds resident and slot experts in such pages
// (link::SlotArena), which read faster than 4 KiB ones, so a floor read from slower pages than
// the weights would flatter the decode, and a kernel benchmark whose weights sit in 4 KiB pages
// measures a kernel the engine never runs (on an Intel Xeon, model 167, a 4 KiB pool read 15.5
// GB/s and a 2 MiB one 19.3).
template <typename T>
class HugePageArray {
 public:
  explicit HugePageArray(size_t n, T fill = T{})
      : data_(reinterpret_cast<T*>(allocate_huge_pages(std::max<size_t>(n, 1) * sizeof(T)))),
        n_(n) {
    if (data_ == nullptr) throw std::bad_alloc();
    std::fill(data_, data_ + n, fill);
  }
  ~HugePageArray() { std::free(data_); }
  HugePageArray(const HugePageArray&) = delete;
  HugePageArray& operator=(const HugePageArray&) = delete;
  T* data() { return data_; }
  const T* data() const { return data_; }
  size_t size() const { return n_; }
  T& operator[](size_t i) { return data_[i]; }
  const T& operator[](size_t i) const { return data_[i]; }
  T* begin() { return data_; }
  T* end() { return data_ + n_; }

 private:
  T* data_ = nullptr;
  size_t n_ = 0;
};

// The read floor's probe: floats set to 1.
class HugePageFloats : public HugePageArray<float> {
 public:
  explicit HugePageFloats(size_t n) : HugePageArray<float>(n, 1.0f) {}
};

// Best read bandwidth (bytes/s, wall clock) of `passes_each` plain and as many prefetching
// passes over `buf`, split over `threads` threads.
inline double read_bandwidth(std::span<const float> buf, int threads, int passes_each) {
  const size_t n = buf.size();
  const bool avx512 = __builtin_cpu_supports("avx512f");
  std::vector<float> part(static_cast<size_t>(threads));
  double best = 0.0;
  for (int pass = 0; pass < 2 * passes_each; ++pass) {
    const bool prefetch = pass % 2 == 1;
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        const size_t begin = n * static_cast<size_t>(t) / static_cast<size_t>(threads);
        const size_t end = n * static_cast<size_t>(t + 1) / static_cast<size_t>(threads);
        part[static_cast<size_t>(t)] = read_sum(&buf[begin], end - begin, avx512, prefetch);
      });
    }
    for (auto& th : pool) th.join();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, static_cast<double>(n * sizeof(float)) / s);
  }
  volatile float sink = 0.0f;
  for (float v : part) sink = sink + v;
  return best;
}

}  // namespace steermoe::bench
