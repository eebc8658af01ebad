// AVX2 + FMA + F16C implementations (for x86-64 CPUs without AVX-512). Target attributes rather
// than -mavx2 keep AVX2 code from leaking into other translation units.
// GCC 12's AVX-512 intrinsics build "undefined" vectors by self-initialisation, which its
// -Wuninitialized reports after inlining; the warning points into the header, so silence it there.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "common/error.hpp"
#include "kernels/kernels_internal.hpp"
#include "kernels/quant_internal.hpp"

namespace steermoe::kernels::detail {
namespace {

#define SM_TARGET __attribute__((target("avx2,fma,f16c")))

struct Simd {
  using V = __m256;
  static constexpr size_t kLanes = 8;
  // 4 rows x 2 tokens = 8 accumulators + 4 weight vectors + 1 input vector of 16 registers.
  static constexpr int kTileRows = 4;
  static constexpr int kTileTokens = 2;

  SM_TARGET static V zero() { return _mm256_setzero_ps(); }
  SM_TARGET static V set1(float a) { return _mm256_set1_ps(a); }
  SM_TARGET static V load(const float* p) { return _mm256_loadu_ps(p); }
  SM_TARGET static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  SM_TARGET static V add(V a, V b) { return _mm256_add_ps(a, b); }
  SM_TARGET static V sub(V a, V b) { return _mm256_sub_ps(a, b); }
  SM_TARGET static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  SM_TARGET static V div(V a, V b) { return _mm256_div_ps(a, b); }
  SM_TARGET static V max(V a, V b) { return _mm256_max_ps(a, b); }
  SM_TARGET static V fmadd(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  SM_TARGET static V swap_pairs(V v) { return _mm256_permute_ps(v, 0xB1); }

  SM_TARGET static V load_bf16(const uint16_t* p) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  SM_TARGET static V load_f16(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }

  // Fixed tree: 8 -> 4 -> 2 -> 1.
  SM_TARGET static float hsum(V v) {
    const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 0x55)));
  }
  SM_TARGET static float hmax(V v) {
    const __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 m2 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    return _mm_cvtss_f32(_mm_max_ss(m2, _mm_shuffle_ps(m2, m2, 0x55)));
  }

  // Same algorithm as the AVX-512 exp (Cephes reduction and polynomial).
  SM_TARGET static V exp(V x) {
    const V xc = _mm256_min_ps(_mm256_max_ps(x, set1(-87.0f)), set1(88.37f));
    const V n = _mm256_round_ps(mul(xc, set1(1.44269504088896341f)),
                                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    V r = _mm256_fnmadd_ps(n, set1(0.693359375f), xc);
    r = _mm256_fnmadd_ps(n, set1(-2.12194440e-4f), r);
    V poly = set1(1.9875691500e-4f);
    poly = fmadd(poly, r, set1(1.3981999507e-3f));
    poly = fmadd(poly, r, set1(8.3334519073e-3f));
    poly = fmadd(poly, r, set1(4.1665795894e-2f));
    poly = fmadd(poly, r, set1(1.6666665459e-1f));
    poly = fmadd(poly, r, set1(5.0000001201e-1f));
    const V y = add(fmadd(poly, mul(r, r), r), set1(1.0f));
    const __m256i bits =
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    V result = mul(y, _mm256_castsi256_ps(bits));
    const V over = _mm256_cmp_ps(x, set1(88.72283905206835f), _CMP_GT_OQ);
    const V under = _mm256_cmp_ps(x, set1(-87.0f), _CMP_LT_OQ);
    result = _mm256_blendv_ps(result, set1(std::numeric_limits<float>::infinity()), over);
    return _mm256_blendv_ps(result, zero(), under);
  }
};

const QuantOps& quant_ops() {
  return avx2_quant_ops();
}

#include "kernels/simd_generic.inc"

}  // namespace

const KernelTable& avx2_table() {
  static const KernelTable table = [] {
    KernelTable t{};
    t.isa = Isa::kAvx2;
    fill_table(t);
    return t;
  }();
  return table;
}

}  // namespace steermoe::kernels::detail
