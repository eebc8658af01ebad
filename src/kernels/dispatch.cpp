// Run-time selection of the implementation, conversions, per-thread scratch and the threaded
// public entry points.
#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include "common/error.hpp"
#include "kernels/kernels_internal.hpp"

namespace steermoe::kernels {

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "f32";
    case DType::kBF16:
      return "bf16";
    case DType::kF16:
      return "f16";
  }
  return "?";
}

size_t dtype_size(DType dtype) {
  return dtype == DType::kF32 ? 4 : 2;
}

float bf16_to_f32(uint16_t v) {
  return std::bit_cast<float>(static_cast<uint32_t>(v) << 16);
}

uint16_t f32_to_bf16(float v) {
  const uint32_t bits = std::bit_cast<uint32_t>(v);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  const uint32_t rounded = bits + 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(rounded >> 16);
}

float f16_to_f32(uint16_t v) {
  const uint32_t sign = static_cast<uint32_t>(v & 0x8000u) << 16;
  const uint32_t exponent = (v >> 10) & 0x1fu;
  const uint32_t mantissa = v & 0x3ffu;
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24 is exact in f32.
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign != 0 ? -magnitude : magnitude;
  }
  if (exponent == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

uint16_t f32_to_f16(float v) {
  const uint32_t bits = std::bit_cast<uint32_t>(v);
  const auto sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude >= 0x7f800000u) {
    return static_cast<uint16_t>(sign | 0x7c00u | (magnitude > 0x7f800000u ? 0x200u : 0u));
  }
  if (magnitude >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520: inf
  if (magnitude < 0x38800000u) {
    // Below the smallest normal f16 (2^-14): the result is a subnormal count of 2^-24 units;
    // scaling by 2^24 is exact and nearbyint rounds to nearest even.
    const float units = std::nearbyint(std::bit_cast<float>(magnitude) * 16777216.0f);
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(units));
  }
  uint32_t rebased = magnitude - 0x38000000u;  // exponent bias 127 -> 15
  rebased += 0xfffu + ((rebased >> 13) & 1u);
  return static_cast<uint16_t>(sign | (rebased >> 13));
}

std::string_view isa_name(Isa isa) {
  switch (isa) {
    case Isa::kScalar:
      return "scalar";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvx512:
      return "avx512";
    case Isa::kAvx512Bf16:
      return "avx512bf16";
  }
  return "?";
}

#if defined(__x86_64__) || defined(__i386__)
namespace {
// Features clang 14's __builtin_cpu_supports does not know ("f16c", "avx512bf16") are read from
// CPUID directly; the OS's support for the register state they use is already established by the
// avx2 / avx512f checks done through __builtin_cpu_supports.
bool cpu_has_f16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0) return false;
  return (ecx & (1u << 29)) != 0;
}

bool cpu_has_avx512_bf16() {  // leaf 7 sub-leaf 1, EAX bit 5
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) == 0) return false;
  return (eax & (1u << 5)) != 0;
}
}  // namespace
#endif

bool isa_available(Isa isa) {
#if defined(__x86_64__) || defined(__i386__)
  switch (isa) {
    case Isa::kScalar:
      return true;
    case Isa::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c();
    case Isa::kAvx512:
      return isa_available(Isa::kAvx2) && __builtin_cpu_supports("avx512f");
    case Isa::kAvx512Bf16:
      return isa_available(Isa::kAvx512) && __builtin_cpu_supports("avx512bw") &&
             cpu_has_avx512_bf16();
  }
  return false;
#else
  return isa == Isa::kScalar;
#endif
}

Isa best_isa() {
  static const Isa best = [] {
    for (Isa isa : {Isa::kAvx512Bf16, Isa::kAvx512, Isa::kAvx2}) {
      if (isa_available(isa)) return isa;
    }
    return Isa::kScalar;
  }();
  return best;
}

namespace {
std::atomic<const KernelTable*> g_active{nullptr};
}  // namespace

const KernelTable& kernel_table(Isa isa) {
  if (!isa_available(isa)) {
    throw Error(fmt::format("kernels: isa: this CPU lacks the features of '{}'", isa_name(isa)));
  }
  switch (isa) {
    case Isa::kScalar:
      return detail::scalar_table();
    case Isa::kAvx2:
      return detail::avx2_table();
    case Isa::kAvx512:
      return detail::avx512_table();
    case Isa::kAvx512Bf16:
      return detail::avx512_bf16_table();
  }
  return detail::scalar_table();
}

void set_active_isa(Isa isa) {
  g_active.store(&kernel_table(isa), std::memory_order_release);
}

const KernelTable& active_kernels() {
  const KernelTable* table = g_active.load(std::memory_order_acquire);
  if (table == nullptr) {
    table = &kernel_table(best_isa());
    g_active.store(table, std::memory_order_release);
  }
  return *table;
}

Isa active_isa() {
  return active_kernels().isa;
}

namespace detail {

void rope_angles(size_t pos, size_t rot_dim, const RopeParams& p, float* cos_out,
                 float* sin_out) {
  // transformers: inv_freq = 1 / theta ** (arange(0, d, 2).float() / d) in fp32 (or the scaled
  // frequencies of a rope type, given in p.inv_freq), then freqs = pos * inv_freq in fp32;
  // cos/sin of the fp32 angle, times the attention factor (YaRN) in fp32.
  const float position = static_cast<float>(pos);
  for (size_t i = 0; i < rot_dim / 2; ++i) {
    float inv = 0.0f;
    if (p.inv_freq != nullptr) {
      inv = p.inv_freq[i];
    } else {
      const float exponent = static_cast<float>(2 * i) / static_cast<float>(rot_dim);
      const auto power = static_cast<float>(std::pow(static_cast<double>(p.theta), exponent));
      inv = 1.0f / power;
    }
    const float angle = position * inv;
    cos_out[i] = static_cast<float>(std::cos(static_cast<double>(angle)));
    sin_out[i] = static_cast<float>(std::sin(static_cast<double>(angle)));
    if (p.attention_factor != 1.0f) {
      cos_out[i] *= p.attention_factor;
      sin_out[i] *= p.attention_factor;
    }
  }
}

}  // namespace detail

// ---- Threaded and convenience entry points ----------------------------------------------------

namespace {
// Rows per chunk unit: keeps each thread's outputs on separate cache lines.
constexpr size_t kRowGrain = 16;

void check_matrix(const Matrix& w) {
  SM_ASSERT(w.data != nullptr || w.rows == 0 || w.cols == 0);
  SM_ASSERT(w.stride() >= w.cols);
}
}  // namespace

void matvec(ThreadPool& pool, const Matrix& w, const float* x, float* y, MatvecParams p) {
  check_matrix(w);
  const KernelTable& k = active_kernels();
  pool.parallel_for(
      w.rows, [&](size_t begin, size_t end) { k.matvec_rows(w, x, y + begin, begin, end, p); },
      kRowGrain);
}

void matmul(ThreadPool& pool, const Matrix& w, const float* x, size_t n, float* y, MatvecParams p,
            size_t x_stride, size_t y_stride) {
  check_matrix(w);
  if (x_stride == 0) x_stride = w.cols;
  if (y_stride == 0) y_stride = w.rows;
  const KernelTable& k = active_kernels();
  pool.parallel_for(
      w.rows,
      [&](size_t begin, size_t end) {
        k.matmul_rows(w, x, x_stride, n, y, y_stride, begin, end, p);
      },
      kRowGrain);
}

void matvec_batch(ThreadPool& pool, const MatvecJob* jobs, size_t n_jobs) {
  size_t total_rows = 0;
  for (size_t j = 0; j < n_jobs; ++j) {
    check_matrix(jobs[j].w);
    total_rows += jobs[j].w.rows;
  }
  const KernelTable& k = active_kernels();
  // [begin, end) indexes the rows of all jobs laid end to end.
  pool.parallel_for(
      total_rows,
      [&](size_t begin, size_t end) {
        size_t job_start = 0;
        for (size_t j = 0; j < n_jobs && job_start < end; ++j) {
          const MatvecJob& job = jobs[j];
          const size_t job_end = job_start + job.w.rows;
          const size_t lo = std::max(begin, job_start);
          const size_t hi = std::min(end, job_end);
          if (lo < hi) {
            k.matvec_rows(job.w, job.x, job.y + (lo - job_start), lo - job_start, hi - job_start,
                          job.params);
          }
          job_start = job_end;
        }
      },
      kRowGrain);
}

void rmsnorm(const float* x, const float* weight, float* out, size_t n, RmsNormParams p) {
  active_kernels().rmsnorm(x, weight, out, n, p);
}

void rmsnorm_rows(const float* x, const float* weight, float* out, size_t rows, size_t n,
                  RmsNormParams p) {
  const KernelTable& k = active_kernels();
  for (size_t r = 0; r < rows; ++r) k.rmsnorm(x + r * n, weight, out + r * n, n, p);
}

void rope(float* x, size_t n_heads, size_t pos, const RopeParams& p) {
  const size_t rot = p.rot_dim == 0 ? p.head_dim : p.rot_dim;
  SM_ASSERT(rot % 2 == 0 && rot <= detail::kMaxRotDim && p.rot_offset + rot <= p.head_dim);
  active_kernels().rope(x, n_heads, pos, p);
}

void swiglu(const float* gate, const float* up, float* out, size_t n) {
  active_kernels().swiglu(gate, up, out, n);
}
void softmax(float* x, size_t n) {
  active_kernels().softmax(x, n);
}
float dot(const float* a, const float* b, size_t n) {
  return active_kernels().dot(a, b, n);
}
void axpy(float a, const float* x, float* y, size_t n) {
  active_kernels().axpy(a, x, y, n);
}
void add(const float* a, const float* b, float* out, size_t n) {
  active_kernels().add(a, b, out, n);
}
void scale(float a, float* x, size_t n) {
  active_kernels().scale(a, x, n);
}

namespace {
void check_attention(const AttentionParams& p) {
  SM_ASSERT(p.n_kv_heads > 0 && p.n_heads % p.n_kv_heads == 0);
  SM_ASSERT(p.head_dim_k > 0 && p.head_dim_v > 0);
}
}  // namespace

void attention(ThreadPool& pool, const float* q, const float* k, const float* v, size_t n_pos,
               float* out, const AttentionParams& p) {
  check_attention(p);
  SM_ASSERT(n_pos > 0);
  const KernelTable& kt = active_kernels();
  pool.parallel_for(p.n_heads, [&](size_t begin, size_t end) {
    auto* scratch = static_cast<float*>(detail::thread_scratch(n_pos * sizeof(float), 0));
    kt.attention_heads(q, k, v, n_pos, out, p, begin, end, scratch);
  });
}

void attention_prefill(ThreadPool& pool, const float* q, size_t q_stride, size_t n_q,
                       size_t first_pos, const float* k, const float* v, float* out,
                       size_t out_stride, const AttentionParams& p) {
  check_attention(p);
  const KernelTable& kt = active_kernels();
  const size_t n_items = n_q * p.n_heads;
  pool.parallel_for(n_items, [&](size_t begin, size_t end) {
    auto* scratch =
        static_cast<float*>(detail::thread_scratch((first_pos + n_q) * sizeof(float), 0));
    // Items are (query, head) pairs in query-major order; run each query's heads in one call.
    size_t item = begin;
    while (item < end) {
      const size_t query = item / p.n_heads;
      const size_t head_begin = item % p.n_heads;
      const size_t head_end = std::min(p.n_heads, head_begin + (end - item));
      kt.attention_heads(q + query * q_stride, k, v, first_pos + query + 1,
                         out + query * out_stride, p, head_begin, head_end, scratch);
      item += head_end - head_begin;
    }
  });
}

}  // namespace steermoe::kernels
