// Block-quantized products, AVX2: maddubs (u8 x s8 -> pairs of int16, exact for these ranges) then
// madd with ones; multi-input tiles for every block type (Q8_0, Q4_K, Q5_K and Q6_K in
// quant_ymm_tiles.inc, the others in quant_simd.inc).
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

// Prefetch distance of the single-row kernels (Q4_0/Q4_1/Q5_0/Q5_1, Q5_K, FP8), measured with
// bench_quant VsRead on an AVX2 EPYC, fraction of the read floor with none -> 1024 -> 2048 B:
// Q5_K 0.55 -> 0.66 -> 0.68, Q5_1 0.47 -> 0.51 -> 0.57, Q4_1 0.46 -> 0.54 -> 0.59, FP8 0.33 ->
// 0.43 -> 0.41; Q4_0 and Q5_0 (compute-bound) unchanged at 0.42-0.45.
#define SM_QPREFETCH_AHEAD 2048
#include "kernels/quant_simd.inc"
// After quant_simd.inc: the tiles use its helpers (q_load, q_f16, q_hsum) and IntDot.
#include "kernels/quant_ymm_tiles.inc"  // NOLINT(build/include_order)

}  // namespace

const QuantOps& avx2_quant_ops() {
  static const QuantOps ops = [] {
    QuantOps o = simd_quant_ops();
    // Tiles[k - 1] takes k inputs; Tiles[0] is also the single-input kernel.
    auto set = [&o]<QuantTileFn... Tiles>(DType t) {
      static_assert(sizeof...(Tiles) == kMaxTileInputs);
      constexpr QuantTileFn kTiles[] = {Tiles...};
      const size_t i = static_cast<size_t>(t) - static_cast<size_t>(DType::kQ8_0);
      o.dot[i] = y_single<kTiles[0]>;
      o.rows[i] = y_rows<kTiles[0]>;
      for (size_t k = 0; k < kMaxTileInputs; ++k) o.tile[i][k] = kTiles[k];
    };
    set.operator()<yt_q8_0<1>, yt_q8_0<2>, yt_q8_0<3>, yt_q8_0<4>, yt_q8_0<5>, yt_q8_0<6>,
                   yt_q8_0<7>, yt_q8_0<8>>(DType::kQ8_0);
    set.operator()<yt_q4_k<1>, yt_q4_k<2>, yt_q4_k<3>, yt_q4_k<4>, yt_q4_k<5>, yt_q4_k<6>,
                   yt_q4_k<7>, yt_q4_k<8>>(DType::kQ4_K);
    set.operator()<yt_q5_k<1>, yt_q5_k<2>, yt_q5_k<3>, yt_q5_k<4>, yt_q5_k<5>, yt_q5_k<6>,
                   yt_q5_k<7>, yt_q5_k<8>>(DType::kQ5_K);
    set.operator()<qt_x_0<1, false>, qt_x_0<2, false>, qt_x_0<3, false>, qt_x_0<4, false>,
                   qt_x_0<5, false>, qt_x_0<6, false>, qt_x_0<7, false>, qt_x_0<8, false>>(
        DType::kQ4_0);
    set.operator()<qt_x_1<1, false>, qt_x_1<2, false>, qt_x_1<3, false>, qt_x_1<4, false>,
                   qt_x_1<5, false>, qt_x_1<6, false>, qt_x_1<7, false>, qt_x_1<8, false>>(
        DType::kQ4_1);
    set.operator()<qt_x_0<1, true>, qt_x_0<2, true>, qt_x_0<3, true>, qt_x_0<4, true>,
                   qt_x_0<5, true>, qt_x_0<6, true>, qt_x_0<7, true>, qt_x_0<8, true>>(
        DType::kQ5_0);
    set.operator()<qt_x_1<1, true>, qt_x_1<2, true>, qt_x_1<3, true>, qt_x_1<4, true>,
                   qt_x_1<5, true>, qt_x_1<6, true>, qt_x_1<7, true>, qt_x_1<8, true>>(
        DType::kQ5_1);
    set.operator()<yt_q6_k<1>, yt_q6_k<2>, yt_q6_k<3>, yt_q6_k<4>, yt_q6_k<5>, yt_q6_k<6>,
                   yt_q6_k<7>, yt_q6_k<8>>(DType::kQ6_K);
    set.operator()<qt_q2_k<1>, qt_q2_k<2>, qt_q2_k<3>, qt_q2_k<4>, qt_q2_k<5>, qt_q2_k<6>,
                   qt_q2_k<7>, qt_q2_k<8>>(DType::kQ2_K);
    set.operator()<qt_q3_k<1>, qt_q3_k<2>, qt_q3_k<3>, qt_q3_k<4>, qt_q3_k<5>, qt_q3_k<6>,
                   qt_q3_k<7>, qt_q3_k<8>>(DType::kQ3_K);
    return o;
  }();
  return ops;
}

}  // namespace steermoe::kernels::detail
