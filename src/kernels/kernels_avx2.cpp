// AVX2 + FMA + F16C implementations (for x86-64 CPUs without AVX-512). Target attributes rather
// than -mavx2 keep AVX2 code from leaking into other translation units.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "common/error.hpp"
#include "kernels/intrinsics.hpp"
#include "kernels/kernels_internal.hpp"
#include "kernels/quant_internal.hpp"

namespace steermoe::kernels::detail {
namespace {

#define SM_TARGET __attribute__((target("avx2,fma,f16c")))

#include "kernels/simd_x86.inc"

struct Simd {
  SM_SIMD_X86_TRAITS(256, /*tile_tokens=*/2)
  // Decode (one input) as one stream with two chains, not strided tiles (simd_generic.inc).
  static constexpr bool kDecodeOneStream = false;

  // The 16-bit elements of one vector (bf16 or f16), as integers.
  SM_TARGET static __m128i load_halves(const uint16_t* p) {
    return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  }
  SM_TARGET static float hsum(V v) { return hsum8(v); }
  SM_TARGET static float hmax(V v) { return hmax8(v); }
  SM_TARGET static V round_nearest(V v) {
    return _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  // Per lane: x > t ? a : b, and x < t ? a : b.
  SM_TARGET static V select_gt(V x, V t, V a, V b) {
    return _mm256_blendv_ps(b, a, _mm256_cmp_ps(x, t, _CMP_GT_OQ));
  }
  SM_TARGET static V select_lt(V x, V t, V a, V b) {
    return _mm256_blendv_ps(b, a, _mm256_cmp_ps(x, t, _CMP_LT_OQ));
  }
};

const QuantOps& quant_ops() {
  return avx2_quant_ops();
}

#include "kernels/simd_generic.inc"

}  // namespace

const KernelTable& avx2_table() {
  static const KernelTable table = simd_table(Isa::kAvx2);
  return table;
}

}  // namespace steermoe::kernels::detail
