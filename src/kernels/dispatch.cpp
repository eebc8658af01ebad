// Run-time selection of the implementation, conversions, per-thread scratch and the threaded
// public entry points.
#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include "common/error.hpp"
#include "kernels/kernels_internal.hpp"
#include "kernels/quant_internal.hpp"
#include "quant/quant.hpp"

namespace steermoe::kernels {

namespace {
quant::Type quant_type(DType dtype) {
  SM_ASSERT(detail::is_quant(dtype));
  return static_cast<quant::Type>(static_cast<int>(dtype) - static_cast<int>(DType::kQ8_0));
}
}  // namespace

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "f32";
    case DType::kBF16:
      return "bf16";
    case DType::kF16:
      return "f16";
    case DType::kQ8_0:
      return "q8_0";
    case DType::kQ4_0:
      return "q4_0";
    case DType::kQ4_1:
      return "q4_1";
    case DType::kQ5_0:
      return "q5_0";
    case DType::kQ5_1:
      return "q5_1";
    case DType::kQ4_K:
      return "q4_k";
    case DType::kQ5_K:
      return "q5_k";
    case DType::kQ6_K:
      return "q6_k";
    case DType::kQ2_K:
      return "q2_k";
    case DType::kQ3_K:
      return "q3_k";
    case DType::kF8E4M3:
      return "f8_e4m3";
  }
  return "?";
}

size_t dtype_size(DType dtype) {
  SM_ASSERT_MSG(!dtype_is_block(dtype), "dtype_size of a block type");
  return dtype == DType::kF32 ? 4 : dtype == DType::kF8E4M3 ? 1 : 2;
}

bool dtype_is_block(DType dtype) {
  return detail::is_quant(dtype) && dtype != DType::kF8E4M3;
}

size_t dtype_block_elements(DType dtype) {
  return detail::is_quant(dtype) ? quant::info(quant_type(dtype)).block_elements : 1;
}

size_t dtype_block_bytes(DType dtype) {
  return detail::is_quant(dtype) ? quant::info(quant_type(dtype)).block_bytes : dtype_size(dtype);
}

size_t row_bytes(DType dtype, size_t elements) {
  const size_t be = dtype_block_elements(dtype);
  SM_ASSERT_MSG(elements % be == 0, "row_bytes: not a whole number of blocks");
  return elements / be * dtype_block_bytes(dtype);
}

namespace {
size_t fp8_scale_floats(const Matrix& m) {
  if (m.rows == 0) return 0;
  const size_t scale_rows = (m.rows + kFp8ScaleBlock - 1) / kFp8ScaleBlock;
  const size_t scale_cols = (m.cols + kFp8ScaleBlock - 1) / kFp8ScaleBlock;
  return (scale_rows - 1) * m.scale_row_stride() + scale_cols;
}
}  // namespace

size_t stored_bytes(const Matrix& m) {
  size_t bytes = m.rows * row_bytes(m.dtype, m.cols);
  if (m.dtype == DType::kF8E4M3) bytes += fp8_scale_floats(m) * sizeof(float);
  return bytes;
}

MatrixRanges matrix_ranges(const Matrix& m) {
  MatrixRanges r;
  if (m.rows == 0 || m.cols == 0) return r;
  r.range[0] = {m.data, (m.rows - 1) * row_bytes(m.dtype, m.stride()) + row_bytes(m.dtype, m.cols)};
  r.count = 1;
  if (m.dtype == DType::kF8E4M3) {
    r.range[1] = {m.scales, fp8_scale_floats(m) * sizeof(float)};
    r.count = 2;
  }
  return r;
}

void dequantize_row(const Matrix& w, size_t r, float* dst) {
  SM_ASSERT(r < w.rows);
  const auto* base = static_cast<const uint8_t*>(w.data);
  switch (w.dtype) {
    case DType::kF32:
      std::memcpy(dst, base + r * w.stride() * 4, w.cols * 4);
      return;
    case DType::kBF16:
    case DType::kF16: {
      const auto* p = reinterpret_cast<const uint16_t*>(base) + r * w.stride();
      for (size_t c = 0; c < w.cols; ++c) {
        dst[c] = w.dtype == DType::kBF16 ? bf16_to_f32(p[c]) : f16_to_f32(p[c]);
      }
      return;
    }
    case DType::kF8E4M3: {
      const uint8_t* p = base + r * w.stride();
      const float* sc = w.scales + (r / kFp8ScaleBlock) * w.scale_row_stride();
      for (size_t c = 0; c < w.cols; ++c) {
        dst[c] = quant::fp8_e4m3_to_f32(p[c]) * sc[c / kFp8ScaleBlock];
      }
      return;
    }
    default:
      quant::dequantize_row(quant_type(w.dtype), base + r * row_bytes(w.dtype, w.stride()), dst,
                            w.cols);
  }
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

void select_isa_from_env() {
  const char* env = std::getenv("STEERMOE_KERNELS");
  if (env == nullptr || *env == '\0') return;
  for (const Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Bf16}) {
    if (isa_name(isa) == std::string_view(env)) {
      set_active_isa(isa);
      return;
    }
  }
  fail("STEERMOE_KERNELS", "value", "expected scalar, avx2, avx512 or avx512bf16, found {}", env);
}

namespace detail {

void rope_angles(size_t pos, size_t rot_dim, const RopeParams& p, float* cos_out, float* sin_out) {
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
  SM_ASSERT(w.cols % dtype_block_elements(w.dtype) == 0);
  SM_ASSERT(w.dtype != DType::kF8E4M3 || w.scales != nullptr);
}
}  // namespace

void matvec(ThreadPool& pool, const Matrix& w, const float* x, float* y, MatvecParams p) {
  check_matrix(w);
  const KernelTable& k = active_kernels();
  pool.parallel_for(
      w.rows, [&](size_t begin, size_t end) { k.matvec_rows(w, x, y + begin, begin, end, p); },
      kRowGrain);
}

namespace {
// Whether a product over several inputs quantizes them once for all its row chunks (block types,
// more than one thread) rather than each chunk quantizing them itself (the same bits either way).
bool inputs_quantized_once(const ThreadPool& pool, const Matrix& w) {
  return pool.size() > 1 && detail::is_quant(w.dtype) && w.dtype != DType::kF8E4M3;
}

// Block-type inputs of one matmul() call, quantized once: grow-only, one per calling thread (a
// matmul is not called from inside a parallel_for), so nothing allocates after warm-up.
struct QuantizedInputs {
  std::vector<detail::ActQ8> acts;
  std::unique_ptr<uint8_t, decltype(&std::free)> bytes{nullptr, &std::free};
  size_t capacity = 0;

  const detail::ActQ8* fill(ThreadPool& pool, const KernelTable& k, const float* x, size_t x_stride,
                            size_t n, size_t cols) {
    const size_t per = detail::act_bytes(cols);  // a multiple of 64 (act_bytes' contract)
    if (n * per > capacity) {
      bytes.reset(static_cast<uint8_t*>(std::aligned_alloc(64, n * per)));
      if (bytes == nullptr) throw std::bad_alloc();
      capacity = n * per;
    }
    if (acts.size() < n) acts.resize(n);
    uint8_t* base = bytes.get();
    detail::ActQ8* out = acts.data();
    pool.parallel_for(n, [&](size_t begin, size_t end) {
      for (size_t i = begin; i < end; ++i)
        out[i] = k.quantize_input(x + i * x_stride, cols, base + i * per);
    });
    return out;
  }
};
}  // namespace

void matmul(ThreadPool& pool, const Matrix& w, const float* x, size_t n, float* y, MatvecParams p,
            size_t x_stride, size_t y_stride) {
  check_matrix(w);
  if (x_stride == 0) x_stride = w.cols;
  if (y_stride == 0) y_stride = w.rows;
  const KernelTable& k = active_kernels();
  // Several row chunks read the same inputs: quantize them once here, not once per chunk.
  if (n > 1 && inputs_quantized_once(pool, w)) {
    thread_local QuantizedInputs quantized;
    p.quantized_inputs = quantized.fill(pool, k, x, x_stride, n, w.cols);
  }
  pool.parallel_for(
      w.rows,
      [&](size_t begin, size_t end) {
        k.matmul_rows(w, x, x_stride, n, y, y_stride, begin, end, p);
      },
      kRowGrain);
}

namespace {
// rows_of(j, lo, hi) for every job's rows [lo, hi), the rows of all jobs laid end to end and
// split over the threads as one range (one synchronisation for all jobs).
template <typename RowsOf>
void parallel_job_rows(ThreadPool& pool, const MatvecJob* jobs, size_t n_jobs, RowsOf&& rows_of) {
  size_t total_rows = 0;
  for (size_t j = 0; j < n_jobs; ++j) total_rows += jobs[j].w.rows;
  pool.parallel_for(
      total_rows,
      [&](size_t begin, size_t end) {
        size_t job_start = 0;
        for (size_t j = 0; j < n_jobs && job_start < end; ++j) {
          const size_t job_end = job_start + jobs[j].w.rows;
          const size_t lo = std::max(begin, job_start);
          const size_t hi = std::min(end, job_end);
          if (lo < hi) rows_of(j, lo - job_start, hi - job_start);
          job_start = job_end;
        }
      },
      kRowGrain);
}
}  // namespace

void matvec_batch(ThreadPool& pool, const MatvecJob* jobs, size_t n_jobs) {
  for (size_t j = 0; j < n_jobs; ++j) check_matrix(jobs[j].w);
  const KernelTable& k = active_kernels();
  parallel_job_rows(pool, jobs, n_jobs, [&](size_t j, size_t lo, size_t hi) {
    const MatvecJob& job = jobs[j];
    k.matvec_rows(job.w, job.x, job.y + lo, lo, hi, job.params);
  });
}

void matmul_batch(ThreadPool& pool, const MatvecJob* jobs, size_t n_jobs, size_t n) {
  SM_ASSERT(n_jobs <= kMaxBatchJobs);
  if (n <= 1) return matvec_batch(pool, jobs, n_jobs);
  // matmul_grouped with the same n for every job (it owns the shared quantization and the split).
  MatmulJob grouped[kMaxBatchJobs];
  for (size_t j = 0; j < n_jobs; ++j) {
    grouped[j] = {.w = jobs[j].w, .x = jobs[j].x, .y = jobs[j].y, .n = n, .params = jobs[j].params};
  }
  matmul_grouped(pool, grouped, n_jobs);
}

namespace {
// The block-type inputs of one matmul_grouped() call, quantized once: grow-only, one per calling
// thread (it is not called from inside a parallel_for).
struct GroupedInputs {
  std::vector<detail::ActQ8> acts;  // every quantized input row, job by job
  std::vector<size_t> first;        // [job] index of its first row in acts, or kNoInputs
  std::vector<size_t> owner;        // [quantization] the job whose x it reads
  std::vector<size_t> row_start;    // [quantization + 1] prefix sums of their n
  std::vector<size_t> byte_start;   // [quantization] offset of its bytes
  std::unique_ptr<uint8_t, decltype(&std::free)> bytes{nullptr, &std::free};
  size_t capacity = 0;
};

constexpr size_t kNoInputs = static_cast<size_t>(-1);

// Row r of a job of n inputs begins at unit r * n of the job's range; a range's rows are those
// that begin inside it, rounded to kRowGrain so that threads write separate cache lines. Monotone
// in `unit`, 0 at the job's first unit and `rows` at its last, so consecutive chunks get
// consecutive, disjoint row ranges.
size_t grouped_row_at(size_t unit, size_t n, size_t rows) {
  const size_t r = (unit + n - 1) / n;
  return std::min(rows, (r + kRowGrain - 1) / kRowGrain * kRowGrain);
}
}  // namespace

namespace {
// Decode (one input): the first bytes of the rows a worker takes next, into L2. The experts of a
// MoE layer lie apart in the file, so the kernels' own prefetch, a fixed distance ahead inside
// the rows they stream (kZAheadQ8_0 and the like: 2-4.5 KiB), starts cold on every matrix.
constexpr size_t kWarmNextBytes = 4096;

void warm_rows(const MatmulJob& job, size_t lo, size_t hi) {
  if (job.n != 1 || hi <= lo || job.w.dtype == DType::kF8E4M3) return;
  Matrix row = job.w;
  row.rows = 1;
  row.cols = job.w.stride();
  row.row_stride = 0;
  const size_t row_bytes = stored_bytes(row);
  const auto* at = static_cast<const char*>(job.w.data) + lo * row_bytes;
  const size_t bytes = std::min(kWarmNextBytes, (hi - lo) * row_bytes);
  for (size_t b = 0; b < bytes; b += 64) __builtin_prefetch(at + b, 0, 2);
}
}  // namespace

void matmul_grouped(ThreadPool& pool, const MatmulJob* jobs, size_t n_jobs) {
  const KernelTable& k = active_kernels();
  thread_local GroupedInputs callers;
  GroupedInputs& q = callers;  // the lambdas below run on the workers: this caller's, not theirs
  if (q.first.size() < n_jobs) {
    q.first.resize(n_jobs);
    q.owner.resize(n_jobs);
    q.row_start.resize(n_jobs + 1);
    q.byte_start.resize(n_jobs);
  }
  // Which jobs need their inputs quantized, and where (a job that repeats the previous job's
  // inputs shares them).
  size_t quantizations = 0, rows_total = 0, bytes_total = 0;
  for (size_t j = 0; j < n_jobs; ++j) {
    const MatmulJob& job = jobs[j];
    check_matrix(job.w);
    q.first[j] = kNoInputs;
    if (job.n == 0 || !detail::is_quant(job.w.dtype) || job.w.dtype == DType::kF8E4M3) continue;
    if (j > 0 && q.first[j - 1] != kNoInputs && jobs[j - 1].x == job.x && jobs[j - 1].n == job.n &&
        jobs[j - 1].w.cols == job.w.cols) {
      q.first[j] = q.first[j - 1];
      continue;
    }
    q.first[j] = rows_total;
    q.owner[quantizations] = j;
    q.byte_start[quantizations] = bytes_total;
    q.row_start[quantizations++] = rows_total;
    rows_total += job.n;
    bytes_total += job.n * detail::act_bytes(job.w.cols);  // multiples of 64
  }
  q.row_start[quantizations] = rows_total;
  if (bytes_total > q.capacity) {
    q.bytes.reset(static_cast<uint8_t*>(std::aligned_alloc(64, bytes_total)));
    if (q.bytes == nullptr) throw std::bad_alloc();
    q.capacity = bytes_total;
  }
  if (q.acts.size() < rows_total) q.acts.resize(rows_total);
  if (rows_total > 0) {
    // Every input row of every quantization over the threads.
    pool.parallel_for(rows_total, [&](size_t begin, size_t end) {
      size_t i = static_cast<size_t>(
          std::upper_bound(q.row_start.begin(), q.row_start.begin() + quantizations, begin) -
          q.row_start.begin() - 1);
      for (size_t row = begin; row < end; ++row) {
        while (row >= q.row_start[i + 1]) ++i;
        const MatmulJob& job = jobs[q.owner[i]];
        const size_t local = row - q.row_start[i];
        q.acts[row] = k.quantize_input(
            job.x + local * job.w.cols, job.w.cols,
            q.bytes.get() + q.byte_start[i] + local * detail::act_bytes(job.w.cols));
      }
    });
  }
  size_t units = 0;
  for (size_t j = 0; j < n_jobs; ++j) units += jobs[j].w.rows * jobs[j].n;
  pool.parallel_for(units, [&](size_t begin, size_t end) {
    // This worker's rows of job j: [lo, hi) (empty where it takes none).
    const auto rows_of = [&](size_t j, size_t start) {
      const MatmulJob& job = jobs[j];
      const size_t len = job.w.rows * job.n;
      if (len == 0 || start + len <= begin || start >= end) return std::pair<size_t, size_t>{0, 0};
      return std::pair<size_t, size_t>{
          grouped_row_at(begin - std::min(begin, start), job.n, job.w.rows),
          grouped_row_at(std::min(end, start + len) - start, job.n, job.w.rows)};
    };
    size_t start = 0;
    for (size_t j = 0; j < n_jobs && start < end; ++j) {
      const MatmulJob& job = jobs[j];
      const size_t len = job.w.rows * job.n;
      const auto [lo, hi] = rows_of(j, start);
      if (lo < hi) {
        // The next matrix this worker streams, warmed while this one computes.
        if (j + 1 < n_jobs) {
          const auto [nlo, nhi] = rows_of(j + 1, start + len);
          warm_rows(jobs[j + 1], nlo, nhi);
        }
        MatvecParams p = job.params;
        if (q.first[j] != kNoInputs) p.quantized_inputs = q.acts.data() + q.first[j];
        k.matmul_rows(job.w, job.x, job.w.cols, job.n, job.y, job.w.rows, lo, hi, p);
      }
      start += len;
    }
  });
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
