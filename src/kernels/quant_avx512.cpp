// Block-quantized products, AVX-512 VNNI: vpdpbusd on ymm (u8 x s8 quads summed into int32 in one
// instruction).
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
#include <cstring>

#include "kernels/quant_internal.hpp"
#include "quant/quant.hpp"

namespace steermoe::kernels::detail {
namespace {

#define SM_QTARGET __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))

struct IntDot {
  SM_QTARGET static __m256i dot(__m256i u, __m256i s) {
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
  }
};

#include "kernels/quant_simd.inc"

}  // namespace

namespace {
bool cpu_has_avx512_vnni() {
  return __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx512bw");
}
}  // namespace

const QuantOps& avx512_quant_ops() {
  static const QuantOps& ops = cpu_has_avx512_vnni() ? simd_quant_ops() : avx2_quant_ops();
  return ops;
}

}  // namespace steermoe::kernels::detail
