// AVX-512F implementations (and the AVX-512 BF16 variant of the BF16 matrix products). Functions
// carry target attributes instead of the file being built with -mavx512f, so nothing compiled
// here can leak AVX-512 code into other translation units (inline functions, templates).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "common/error.hpp"
#include "kernels/intrinsics.hpp"
#include "kernels/kernels_internal.hpp"
#include "kernels/quant_internal.hpp"

namespace steermoe::kernels::detail {
namespace {

#define SM_TARGET __attribute__((target("avx512f,avx2,fma,f16c")))

#include "kernels/simd_x86.inc"

struct Simd {
  SM_SIMD_X86_TRAITS(512, /*tile_tokens=*/4)
  // Decode (one input) as one stream with two chains, not strided tiles (simd_generic.inc).
  static constexpr bool kDecodeOneStream = true;

  // The 16-bit elements of one vector (bf16 or f16), as integers.
  SM_TARGET static __m256i load_halves(const uint16_t* p) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  }
  // Fixed tree: 16 -> 8 (lower half op upper half), then the 8-lane tree.
  SM_TARGET static __m256 low(V v) { return _mm512_castps512_ps256(v); }
  SM_TARGET static __m256 high(V v) {
    return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
  }
  SM_TARGET static float hsum(V v) { return hsum8(_mm256_add_ps(low(v), high(v))); }
  SM_TARGET static float hmax(V v) { return hmax8(_mm256_max_ps(low(v), high(v))); }
  SM_TARGET static V round_nearest(V v) {
    return _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  // Per lane: x > t ? a : b, and x < t ? a : b.
  SM_TARGET static V select_gt(V x, V t, V a, V b) {
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, t, _CMP_GT_OQ), b, a);
  }
  SM_TARGET static V select_lt(V x, V t, V a, V b) {
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, t, _CMP_LT_OQ), b, a);
  }
};

const QuantOps& quant_ops() {
  return avx512_quant_ops();
}

#include "kernels/simd_generic.inc"

// ---- AVX-512 BF16: VDPBF16PS over bf16 weights and x rounded to bf16 ---------------------------
//
// Each output accumulates one vector of 16 pair-sums over 32-element blocks in increasing order;
// the last partial block is zero-padded (x is padded in the bf16 copy, W by a masked load).

#define SM_TARGET_BF16 __attribute__((target("avx512f,avx512bw,avx512bf16,avx2,fma,f16c")))

constexpr size_t kBf16Block = 32;

// x rows converted to bf16 (round to nearest even) into `dst`, each padded with zeros to `padded`.
SM_TARGET_BF16 void convert_rows_bf16(const float* x, size_t x_stride, size_t n, size_t cols,
                                      size_t padded, uint16_t* dst) {
  for (size_t i = 0; i < n; ++i) {
    const float* src = x + i * x_stride;
    uint16_t* out = dst + i * padded;
    for (size_t c = 0; c < padded; c += kBf16Block) {
      const size_t m = std::min(kBf16Block, cols - std::min(cols, c));
      const __mmask16 lo_mask = static_cast<__mmask16>(m >= 16 ? 0xffff : (1u << m) - 1);
      const __mmask16 hi_mask = static_cast<__mmask16>(m >= 32  ? 0xffff
                                                       : m > 16 ? (1u << (m - 16)) - 1
                                                                : 0);
      const __m512 lo = _mm512_maskz_loadu_ps(lo_mask, src + c);
      const __m512 hi = _mm512_maskz_loadu_ps(hi_mask, src + c + 16);
      const __m512bh packed = _mm512_cvtne2ps_pbh(hi, lo);
      _mm512_storeu_si512(out + c, (__m512i)packed);
    }
  }
}

// How a tile prefetches the rows it streams from memory (see bf16_tile).
enum class Bf16Prefetch {
  kNone,       // the rows are in cache (prefill's later input groups)
  kNextTiles,  // prefill's first input group: the next tiles' rows at the same column
  kAhead,      // decode (one row per tile): the bytes a fixed distance further on
};

// Decode's distances, bytes past the line being read: into L2, and from there into L1.
// bench_kernels VsRead on an Intel Xeon (model 167, AVX-512 BF16), 1 thread, weights in 2 MiB
// pages, fraction of the read floor (1024 x 2048 / 2048 x 1024, two runs each): 4608 / 1536
// 1.01-1.02 / 0.99-1.01, 4352-4864 / 1536-1792 alike, 5120 / 2048 0.99-1.00 / 0.95-0.96, 4096 /
// 2048 0.92-0.93 / 0.95 (an L2 distance of exactly 4 KiB is 5-8% worse at any L1 distance),
// 4608 / 1280 0.92-0.98, 2048 / 1024 0.90-0.91; the 4-row tiles prefetching the next tiles
// (kNextTiles, the scheme before) 0.82-0.88 at any distance: four streams 4 KiB apart against
// one here.
constexpr size_t kBf16AheadL2 = 4608;
constexpr size_t kBf16AheadL1 = 1536;

template <int R, int N, Bf16Prefetch kPrefetch = Bf16Prefetch::kNone>
SM_TARGET_BF16 inline void bf16_tile(const Matrix& w, size_t r0, const uint16_t* xb, size_t padded,
                                     size_t i0, const Output& out, const MatvecParams& p) {
  const size_t cols = w.cols;
  const size_t full = cols - cols % kBf16Block;
  const uint16_t* rows[R];
  for (int k = 0; k < R; ++k)
    rows[k] = static_cast<const uint16_t*>(w.data) + (r0 + k) * w.stride();
  __m512 acc[R][N];
  for (int k = 0; k < R; ++k) {
    for (int j = 0; j < N; ++j) acc[k][j] = _mm512_setzero_ps();
  }
  // kNextTiles (the first input group of a prefill super-block; decode too until 2026-12-05, when
  // it became kAhead, one row per tile: see kBf16AheadL2) prefetches the next tile's rows (R
  // rows further on) at the same column: one line per row per step (32 bf16 = 64 bytes), a tile
  // ahead of use. The measurements below are of that scheme on 4 KiB pages. Every row is a
  // new stream to the hardware prefetcher, which alone left decode well under the read bandwidth.
  // bench_kernels VsRead, side by side on an Intel Xeon (family 6 model 207), 1 thread: 1024 x
  // 2048 0.87 -> 0.92-0.99 of the read bandwidth; 2048 x 1024 (2 KiB rows, before: one row at a
  // time without prefetch) 0.66 -> 0.91-0.97. The earlier scheme (only the next tile's first
  // 256 elements, during the last 256) and rows one at a time had been measured on an AMD EPYC.
  // A second stage, the tile after next into L2, in 4 alternating pairs on the same Xeon:
  // 1024 x 2048 0.92-1.02 -> 1.01-1.08, 2048 x 1024 0.89-0.93 -> 1.04-1.08 (the L2 stage alone,
  // or the next tile into L2 only, 0.88-0.99). Prefill's first pass the same way, bench_pp_tg
  // BF16 pp128 in 4 alternating rounds: 1 thread +6-16%, 2 threads +10-17%.
  // The addresses may lie past the matrix: integer arithmetic, and a prefetch does not fault.
  const size_t next_bytes = static_cast<size_t>(R) * w.stride() * sizeof(uint16_t);
  const size_t far = kPrefetch == Bf16Prefetch::kAhead ? kBf16AheadL2 : 2 * next_bytes;
  const size_t near = kPrefetch == Bf16Prefetch::kAhead ? kBf16AheadL1 : next_bytes;
  for (size_t c = 0; c < full; c += kBf16Block) {
    __m512bh wv[R];
    for (int k = 0; k < R; ++k) {
      if constexpr (kPrefetch != Bf16Prefetch::kNone) {
        const uintptr_t at = reinterpret_cast<uintptr_t>(rows[k] + c);
        _mm_prefetch(reinterpret_cast<const char*>(at + far), _MM_HINT_T1);
        _mm_prefetch(reinterpret_cast<const char*>(at + near), _MM_HINT_T0);
      }
      wv[k] = (__m512bh)_mm512_loadu_si512(rows[k] + c);
    }
    for (int j = 0; j < N; ++j) {
      const auto xv = (__m512bh)_mm512_loadu_si512(xb + (i0 + j) * padded + c);
      for (int k = 0; k < R; ++k) acc[k][j] = _mm512_dpbf16_ps(acc[k][j], wv[k], xv);
    }
  }
  if (full < cols) {
    const __mmask32 mask = (1u << (cols - full)) - 1;
    __m512bh wv[R];
    for (int k = 0; k < R; ++k) wv[k] = (__m512bh)_mm512_maskz_loadu_epi16(mask, rows[k] + full);
    for (int j = 0; j < N; ++j) {
      const auto xv = (__m512bh)_mm512_loadu_si512(xb + (i0 + j) * padded + full);
      for (int k = 0; k < R; ++k) acc[k][j] = _mm512_dpbf16_ps(acc[k][j], wv[k], xv);
    }
  }
  for (int j = 0; j < N; ++j) {
    float* yj = out.y + (i0 + j) * out.y_stride + (r0 - out.y_row0);
    for (int k = 0; k < R; ++k) yj[k] = finish_value(yj[k], Simd::hsum(acc[k][j]), p);
  }
}

// Rows [r0, r1) against inputs i..i+N-1 in tiles of R rows. Where the rows stream from memory
// (`stream`: prefill's first pass over a super-block; the later passes find them in L2) the tiles
// prefetch the next one, while a next tile lies inside this matrix (it may be another thread's:
// harmless).
template <int N>
SM_TARGET_BF16 inline void bf16_rows(const Matrix& w, size_t r0, size_t r1, bool stream,
                                     const uint16_t* xb, size_t padded, size_t i, const Output& out,
                                     const MatvecParams& p) {
  constexpr int R = Simd::kTileRows;
  size_t r = r0;
  if (stream) {
    for (; r + R <= r1 && r + 2 * R <= w.rows; r += R) {
      bf16_tile<R, N, Bf16Prefetch::kNextTiles>(w, r, xb, padded, i, out, p);
    }
  }
  for (; r + R <= r1; r += R) bf16_tile<R, N>(w, r, xb, padded, i, out, p);
  for (; r < r1; ++r) bf16_tile<1, N>(w, r, xb, padded, i, out, p);
}

SM_TARGET_BF16 void bf16_matmul_impl(const Matrix& w, const uint16_t* xb, size_t padded, size_t n,
                                     const Output& out, size_t row_begin, size_t row_end,
                                     const MatvecParams& p) {
  constexpr int N = Simd::kTileTokens;
  if (n == 1) {
    // Decode: one pass over the rows, one row at a time: a single stream through the matrix
    // (its rows are contiguous), prefetched a fixed distance ahead (kBf16AheadL2 / L1). Each
    // row's sum is the same chain in any tiling, so the bits do not change.
    for (size_t r = row_begin; r < row_end; ++r) {
      bf16_tile<1, 1, Bf16Prefetch::kAhead>(w, r, xb, padded, 0, out, p);
    }
    return;
  }
  for (size_t sb = row_begin; sb < row_end; sb += kSuperRows) {
    const size_t se = std::min(sb + kSuperRows, row_end);
    size_t i = 0;
    for (; i + N <= n; i += N) bf16_rows<N>(w, sb, se, i == 0, xb, padded, i, out, p);
    for (; i < n; ++i) bf16_rows<1>(w, sb, se, i == 0, xb, padded, i, out, p);
  }
}

void bf16_matmul_dispatch(const Matrix& w, const float* x, size_t x_stride, size_t n,
                          const Output& out, size_t row_begin, size_t row_end,
                          const MatvecParams& p) {
  if (w.dtype != DType::kBF16) {
    return matmul_dispatch(w, x, x_stride, n, out, row_begin, row_end, p);
  }
  if (row_begin >= row_end || n == 0) return;
  const size_t padded = (w.cols + kBf16Block - 1) / kBf16Block * kBf16Block;
  auto* xb = static_cast<uint16_t*>(thread_scratch(n * padded * sizeof(uint16_t), 1));
  convert_rows_bf16(x, x_stride, n, w.cols, padded, xb);
  bf16_matmul_impl(w, xb, padded, n, out, row_begin, row_end, p);
}

void bf16_matvec_rows(const Matrix& w, const float* x, float* y, size_t row_begin, size_t row_end,
                      const MatvecParams& p) {
  bf16_matmul_dispatch(w, x, w.cols, 1, Output{y, 0, row_begin}, row_begin, row_end, p);
}

void bf16_matmul_rows(const Matrix& w, const float* x, size_t x_stride, size_t n, float* y,
                      size_t y_stride, size_t row_begin, size_t row_end, const MatvecParams& p) {
  bf16_matmul_dispatch(w, x, x_stride, n, Output{y, y_stride, 0}, row_begin, row_end, p);
}

}  // namespace

const KernelTable& avx512_table() {
  static const KernelTable table = simd_table(Isa::kAvx512);
  return table;
}

const KernelTable& avx512_bf16_table() {
  static const KernelTable table = [] {
    KernelTable t = simd_table(Isa::kAvx512Bf16);
    t.matvec_rows = bf16_matvec_rows;
    t.matmul_rows = bf16_matmul_rows;
    return t;
  }();
  return table;
}

}  // namespace steermoe::kernels::detail
