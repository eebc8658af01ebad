// Block-quantized products, AVX-512 VNNI: vpdpbusd on ymm (u8 x s8 quads summed into int32 in one
// instruction).
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

#include "kernels/quant_simd.inc"

// Q4_K on zmm: the 32 bytes of nibbles for sub-blocks 2c and 2c+1 become one 64-byte vector
// (low nibbles | high nibbles) that lines up with 64 consecutive activation bytes, so one
// vpdpbusd forms both sub-blocks' sums (lanes 0-7 and 8-15) and one f32 FMA applies both scales.
// Same integer sums as the scalar reference; the f32 combination is per lane, as the ymm code.
SM_QTARGET float z_dot_q4_k(const uint8_t* row, const ActQ8& a, size_t cols) {
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  __m256 mins = _mm256_setzero_ps();
  const __m256i low = _mm256_set1_epi8(0x0F);
  const __m512i pick[4] = {_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1),
                           _mm512_setr_epi32(2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3),
                           _mm512_setr_epi32(4, 4, 4, 4, 4, 4, 4, 4, 5, 5, 5, 5, 5, 5, 5, 5),
                           _mm512_setr_epi32(6, 6, 6, 6, 6, 6, 6, 6, 7, 7, 7, 7, 7, 7, 7, 7)};
  for (size_t b = 0; b < cols / 256; ++b, row += 144) {
    const float d = q_f16(row);
    const float dmin = q_f16(row + 2);
    uint32_t w[3];
    std::memcpy(w, row + 4, 12);
    const uint32_t sc8[2] = {w[0] & 0x3f3f3f3fu,
                             (w[2] & 0x0f0f0f0fu) | (((w[0] >> 6) & 0x03030303u) << 4)};
    const uint32_t m8[2] = {w[1] & 0x3f3f3f3fu,
                            ((w[2] >> 4) & 0x0f0f0f0fu) | (((w[1] >> 6) & 0x03030303u) << 4)};
    const __m256 scf = _mm256_cvtepi32_ps(
        _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(sc8))));
    const __m256 mf = _mm256_cvtepi32_ps(
        _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(m8))));
    const __m512 sv = _mm512_castps256_ps512(
        _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(d), scf), _mm256_loadu_ps(a.d + b * 8)));
    mins = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(dmin), mf), _mm256_loadu_ps(a.s32 + b * 8),
                           mins);
    const uint8_t* qs = row + 16;
    const int8_t* xq = a.q + b * 256;
    for (int c = 0; c < 4; ++c) {
      const __m256i q = q_load(qs + 32 * c);
      const __m512i wv = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_and_si256(q, low)),
                                            _mm256_and_si256(_mm256_srli_epi16(q, 4), low), 1);
      const __m512i x = _mm512_loadu_si512(xq + 64 * c);
      const __m512i i = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wv, x);
      const __m512 scale = _mm512_permutexvar_ps(pick[c], sv);
      if (c % 2 == 0) {
        acc0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(i), scale, acc0);
      } else {
        acc1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(i), scale, acc1);
      }
    }
  }
  const __m512 acc = _mm512_add_ps(acc0, acc1);
  const __m256 half = _mm256_add_ps(_mm512_castps512_ps256(acc), _mm512_extractf32x8_ps(acc, 1));
  return q_hsum(half) - q_hsum(mins);
}

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
    o.dot[static_cast<size_t>(DType::kQ4_K) - static_cast<size_t>(DType::kQ8_0)] = z_dot_q4_k;
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
