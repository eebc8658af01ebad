// Block-quantized products, AVX-512 VNNI: vpdpbusd (u8 x s8 quads summed into int32 in one
// instruction) on zmm, with multi-input tiles, for every block type; FP8 on zmm too. The ymm
// table of quant_simd.inc is the base the zmm kernels replace (its activation quantizer stays).
#include <algorithm>
#include <cstring>

#include "kernels/intrinsics.hpp"
#include "kernels/quant_internal.hpp"
#include "quant/quant.hpp"

namespace steermoe::kernels::detail {
namespace {

#define SM_QTARGET \
  __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl,avx512vnni")))

struct IntDot {
  SM_QTARGET static __m256i dot(__m256i u, __m256i s) {
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
  }
};

// No SM_QPREFETCH_AHEAD: every block type's zmm kernel below replaces the ymm single-row ones
// (their prefetch distances are in quant_avx512_tiles.inc).
#include "kernels/quant_simd.inc"
// After quant_simd.inc: the tiles use its helpers (q_load, q_f16, q_hsum).
#include "kernels/quant_avx512_tiles.inc"  // NOLINT(build/include_order)

// FP8 on zmm: 16 codes -> 16 f16 bit patterns ((sign << 8) | (magnitude << 7), the value times
// 2^-8) -> 16 floats per step; the 2^8 is folded into the block scale, as in the ymm code.
SM_QTARGET float z_dot_fp8(const uint8_t* row, const float* scales, const float* x, size_t cols) {
  __m512 acc = _mm512_setzero_ps();
  float tail = 0.0f;
  const __m256i sign = _mm256_set1_epi16(static_cast<short>(0x8000));
  const __m256i mag = _mm256_set1_epi16(0x3F80);
  for (size_t k = 0; k * kFp8ScaleBlock < cols; ++k) {
    const size_t begin = k * kFp8ScaleBlock;
    const size_t end = std::min(cols, begin + kFp8ScaleBlock);
    __m512 p0 = _mm512_setzero_ps(), p1 = _mm512_setzero_ps();
    size_t c = begin;
    for (; c + 32 <= end; c += 32) {
      const __m256i b0 =
          _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + c)));
      const __m256i b1 =
          _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + c + 16)));
      const __m256i h0 = _mm256_or_si256(_mm256_and_si256(_mm256_slli_epi16(b0, 8), sign),
                                         _mm256_and_si256(_mm256_slli_epi16(b0, 7), mag));
      const __m256i h1 = _mm256_or_si256(_mm256_and_si256(_mm256_slli_epi16(b1, 8), sign),
                                         _mm256_and_si256(_mm256_slli_epi16(b1, 7), mag));
      p0 = _mm512_fmadd_ps(_mm512_cvtph_ps(h0), _mm512_loadu_ps(x + c), p0);
      p1 = _mm512_fmadd_ps(_mm512_cvtph_ps(h1), _mm512_loadu_ps(x + c + 16), p1);
    }
    float t = 0.0f;
    for (; c < end; ++c) t += quant::fp8_e4m3_to_f32(row[c]) * x[c];
    acc = _mm512_fmadd_ps(_mm512_add_ps(p0, p1), _mm512_set1_ps(scales[k] * 256.0f), acc);
    tail += t * scales[k];
  }
  const __m256 half = _mm256_add_ps(_mm512_castps512_ps256(acc), _mm512_extractf32x8_ps(acc, 1));
  return q_hsum(half) + tail;
}

const QuantOps& vnni_quant_ops() {
  static const QuantOps ops = [] {
    QuantOps o = simd_quant_ops();
    // Tiles[k - 1] takes k inputs; Tiles[0] is also the single-input kernel.
    auto set = [&o]<QuantTileFn... Tiles>(DType t) {
      static_assert(sizeof...(Tiles) == kMaxTileInputs);
      constexpr QuantTileFn kTiles[] = {Tiles...};
      const size_t i = static_cast<size_t>(t) - static_cast<size_t>(DType::kQ8_0);
      o.dot[i] = z_single<kTiles[0]>;
      o.rows[i] = z_rows<kTiles[0]>;
      for (size_t k = 0; k < kMaxTileInputs; ++k) o.tile[i][k] = kTiles[k];
    };
    set.operator()<zt_q8_0<1>, zt_q8_0_multi<2>, zt_q8_0_multi<3>, zt_q8_0_multi<4>,
                   zt_q8_0_multi<5>, zt_q8_0_multi<6>, zt_q8_0_multi<7>, zt_q8_0_multi<8>>(
        DType::kQ8_0);
    set.
    operator()<zt_legacy<1, false, false>, zt_legacy<2, false, false>, zt_legacy<3, false, false>,
               zt_legacy<4, false, false>, zt_legacy<5, false, false>, zt_legacy<6, false, false>,
               zt_legacy<7, false, false>, zt_legacy<8, false, false>>(DType::kQ4_0);
    set.operator()<zt_legacy<1, true, false>, zt_legacy<2, true, false>, zt_legacy<3, true, false>,
                   zt_legacy<4, true, false>, zt_legacy<5, true, false>, zt_legacy<6, true, false>,
                   zt_legacy<7, true, false>, zt_legacy<8, true, false>>(DType::kQ4_1);
    set.operator()<zt_legacy<1, false, true>, zt_legacy<2, false, true>, zt_legacy<3, false, true>,
                   zt_legacy<4, false, true>, zt_legacy<5, false, true>, zt_legacy<6, false, true>,
                   zt_legacy<7, false, true>, zt_legacy<8, false, true>>(DType::kQ5_0);
    set.operator()<zt_legacy<1, true, true>, zt_legacy<2, true, true>, zt_legacy<3, true, true>,
                   zt_legacy<4, true, true>, zt_legacy<5, true, true>, zt_legacy<6, true, true>,
                   zt_legacy<7, true, true>, zt_legacy<8, true, true>>(DType::kQ5_1);
    set.operator()<zt_q4_k<1>, zt_q4_k<2>, zt_q4_k<3>, zt_q4_k<4>, zt_q4_k<5>, zt_q4_k<6>,
                   zt_q4_k<7>, zt_q4_k<8>>(DType::kQ4_K);
    set.operator()<zt_q5_k<1>, zt_q5_k<2>, zt_q5_k<3>, zt_q5_k<4>, zt_q5_k<5>, zt_q5_k<6>,
                   zt_q5_k<7>, zt_q5_k<8>>(DType::kQ5_K);
    set.operator()<zt_q6_k<1>, zt_q6_k<2>, zt_q6_k<3>, zt_q6_k<4>, zt_q6_k<5>, zt_q6_k<6>,
                   zt_q6_k<7>, zt_q6_k<8>>(DType::kQ6_K);
    set.operator()<zt_q2_k<1>, zt_q2_k<2>, zt_q2_k<3>, zt_q2_k<4>, zt_q2_k<5>, zt_q2_k<6>,
                   zt_q2_k<7>, zt_q2_k<8>>(DType::kQ2_K);
    set.operator()<zt_q3_k<1>, zt_q3_k<2>, zt_q3_k<3>, zt_q3_k<4>, zt_q3_k<5>, zt_q3_k<6>,
                   zt_q3_k<7>, zt_q3_k<8>>(DType::kQ3_K);
    o.dot_fp8 = z_dot_fp8;
    return o;
  }();
  return ops;
}

}  // namespace

namespace {
bool cpu_has_avx512_vnni() {
  return __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq");
}
}  // namespace

const QuantOps& avx512_quant_ops() {
  static const QuantOps& ops = cpu_has_avx512_vnni() ? vnni_quant_ops() : avx2_quant_ops();
  return ops;
}

}  // namespace steermoe::kernels::detail
