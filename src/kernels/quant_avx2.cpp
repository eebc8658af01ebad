// Block-quantized products, AVX2: maddubs (u8 x s8 -> pairs of int16, exact for these ranges) then
// madd with ones.
#include <algorithm>
#include <cstring>

#include "kernels/intrinsics.hpp"
#include "kernels/quant_internal.hpp"
#include "quant/quant.hpp"

namespace steermoe::kernels::detail {
namespace {

#define SM_QTARGET __attribute__((target("avx2,fma,f16c")))

struct IntDot {
  SM_QTARGET static __m256i dot(__m256i u, __m256i s) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
  }
};

#include "kernels/quant_simd.inc"

}  // namespace

const QuantOps& avx2_quant_ops() {
  return simd_quant_ops();
}

}  // namespace steermoe::kernels::detail
