// Block-quantized matrix products: shared between the kernel files; not part of the API.
//
// Decode products on block types quantize the input vector x once per call to int8 in blocks of
// 32 (f32 scale d = max|x| / 127, q = nearest-even(x / d), as llama.cpp's Q8 activations but with
// an f32 scale and one scale per 32 for every weight type) and form exact integer dot products
// per block, combined in f32 with the weight's block scales. FP8 keeps x in f32 (its weights
// have no integer structure worth exploiting: 128-element blocks with an f32 scale).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/kernels.hpp"

namespace steermoe::kernels::detail {

// x quantized for one product: n (a multiple of 32) elements.
struct ActQ8 {
  const int8_t* q = nullptr;   // n values, 32-byte aligned
  const float* d = nullptr;    // n / 32 scales
  const float* s32 = nullptr;  // n / 32: d * (sum of the block's q)
  const float* s16 = nullptr;  // n / 16: d * (sum of each half-block's q)
  // n / 4 each, one per 4 elements (the int32 lanes of a byte dot product), so that the zmm
  // kernels load them as operands instead of shuffling per weight row:
  const float* d8 = nullptr;     // the scale of element 4k's block (each d repeated 8 times)
  const int32_t* nq4 = nullptr;  // -(q[4k] + .. + q[4k + 3]): offsets unsigned weight bytes
  // q with each whole 256-element block's 4-byte groups interleaved (interleave_k), so that in a
  // zmm tile of several inputs (K-quants, Q4_0 / Q4_1 / Q5_0 / Q5_1) step c takes elements
  // 16k + 4c .. 16k + 4c + 3 into lane k and four steps accumulate into one vector whose lane k
  // sums elements 16k .. 16k + 15 (no shuffles per input). Elements past the last whole 256 are
  // not stored (and not read).
  const int8_t* qk = nullptr;
  // Sums of each 8 consecutive q (int16), 16 per group of 4 blocks in q_hadd4's lane order
  // (octet_sums), zeros past the last block: the ymm Q4_0 / Q5_0 / Q3_K / Q6_K kernels multiply
  // the unsigned q and take 8 / 16 / 4 / 32 times these off, exactly, instead of making each
  // weight signed.
  const int16_t* s8 = nullptr;
  // q with each whole group of four 32-element blocks (128 elements) reordered for the ymm tiles
  // of several inputs (interleave_y): step c's int16 lane L (a maddubs pair) holds two elements
  // of the 8 that q_hadd4's lane L sums, so four steps' pair sums added lane by lane (three
  // vpaddw) give q_hadd4's lanes without its three horizontal adds per input. Elements past the
  // last whole group are not stored (and not read).
  const int8_t* qy = nullptr;
};

// Bytes of scratch an ActQ8 of n elements needs.
size_t act_bytes(size_t n);
// Carves an ActQ8 out of `scratch` (act_bytes(n) bytes, 64-byte aligned) and fills it. Every
// implementation produces the same bits (the scalar one is the reference).
using QuantizeActFn = ActQ8 (*)(const float* x, size_t n, void* scratch);
ActQ8 quantize_act_scalar(const float* x, size_t n, void* scratch);
// Where ActQ8::qk lives in an ActQ8's scratch of n elements (every quantizer carves it there).
int8_t* act_qk(void* scratch, size_t n);
// qk from q (n elements): for every whole 256-element block, byte 64c + 4k + i of the block is
// element 16k + 4c + i (c < 4, k < 16, i < 4).
void interleave_k(const int8_t* q, size_t n, int8_t* qk);
// Where ActQ8::s8 lives in an ActQ8's scratch of n elements, and s8 from q: for group g of four
// 32-element blocks, s8[16 g + 8 h + 2 j + t] sums elements 32 (4 g + j) + 16 h + 8 t .. + 7
// (h, t < 2, j < 4); blocks past n / 32 give 0. Derived from the quad sums (ActQ8::nq4, already
// computed), two quads per entry.
int16_t* act_s8(void* scratch, size_t n);
void octet_sums(const int32_t* nq4, size_t n, int16_t* s8);
// Where ActQ8::qy lives in an ActQ8's scratch of n elements, and qy from q: for every whole
// group of 128 elements, byte 32 c + 16 h + 4 s + 2 o + t of the group is element
// 32 s + 16 h + 8 o + 2 c + t (c, s < 4; h, o, t < 2).
int8_t* act_qy(void* scratch, size_t n);
void interleave_y(const int8_t* q, size_t n, int8_t* qy);
// The scalar Q2_K / Q3_K products (quant_scalar.cpp): the reference the SIMD kernels
// (quant_simd.inc on ymm, quant_avx512_tiles.inc on zmm) are tested against.
float dot_q2_k(const uint8_t* row, const ActQ8& a, size_t cols);
float dot_q3_k(const uint8_t* row, const ActQ8& a, size_t cols);

// Dot product of one stored row (cols elements, a whole number of blocks) with quantized x.
using QuantDotFn = float (*)(const uint8_t* row, const ActQ8& a, size_t cols);
// One stored row with several quantized inputs at once: out[i] = dot(row, a[i]) for the tile's
// inputs. The row's unpacking and scales are shared by the inputs (prefill); every input is
// computed exactly as the single-input kernel computes it (the same operations in the same
// order), so results do not depend on the tiling.
using QuantTileFn = void (*)(const uint8_t* row, const ActQ8* a, size_t cols, float* out);
// Decode: rows [row_begin, row_end) of a matrix (row r at data + r * stride_bytes) against one
// quantized input, y[r - row_begin] = finish(dot(row r, a)) as MatvecParams say; the same bits as
// `dot` per row, without a call and the kernel's set-up per row.
using QuantRowsFn = void (*)(const uint8_t* data, size_t stride_bytes, size_t row_begin,
                             size_t row_end, const ActQ8& a, size_t cols, float* y,
                             const MatvecParams& p);
// Tiles take 1 to kMaxTileInputs inputs (QuantOps::tile[type][k - 1] takes k).
inline constexpr size_t kMaxTileInputs = 8;
// FP8 row: scales of this row's 128-row block (ceil(cols / 128) floats), f32 x.
using Fp8DotFn = float (*)(const uint8_t* row, const float* scales, const float* x, size_t cols);

struct QuantOps {
  QuantizeActFn quantize_act;
  QuantDotFn dot[10];  // indexed by DType - kQ8_0 (kQ8_0 .. kQ6_K, kQ2_K, kQ3_K)
  Fp8DotFn dot_fp8;
  // Optional multi-input kernels, [type][k - 1] for k inputs; null: `dot` per input. Every size
  // has its own kernel, so that an expert's 7 tokens take one pass over each weight row rather
  // than three (tiles of 4, 2 and 1).
  QuantTileFn tile[10][kMaxTileInputs] = {};
  QuantRowsFn rows[10] = {};  // optional, for single-input products
};

const QuantOps& scalar_quant_ops();
const QuantOps& avx2_quant_ops();
const QuantOps& avx512_quant_ops();  // AVX-512 VNNI where present, else the AVX2 ops

// The matvec / matmul row drivers for block and FP8 types (any QuantOps): quantize each input row
// into thread scratch, then every output row r in [row_begin, row_end) for every input i. y_stride
// 0 with y pointing at row_begin's slot is the matvec layout.
void quant_matmul_rows(const QuantOps& ops, const Matrix& w, const float* x, size_t x_stride,
                       size_t n, float* y, size_t y_stride, size_t y_row0, size_t row_begin,
                       size_t row_end, const MatvecParams& p);

inline bool is_quant(DType t) {
  return t != DType::kF32 && t != DType::kBF16 && t != DType::kF16;
}

}  // namespace steermoe::kernels::detail
