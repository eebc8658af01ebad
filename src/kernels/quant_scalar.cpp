// Scalar reference of the block-quantized products, the activation quantizer and the shared
// row driver. The SIMD files compute the same integer block sums; only the order of the f32
// accumulation over blocks differs (compare across Isas with tolerances).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/error.hpp"
#include "kernels/kernels_internal.hpp"
#include "kernels/quant_internal.hpp"
#include "quant/quant.hpp"

namespace steermoe::kernels::detail {
namespace {

uint16_t u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
float f16(const uint8_t* p) {
  return quant::f16_to_f32(u16(p));
}

size_t align64(size_t v) {
  return (v + 63) / 64 * 64;
}

// Sum over 32-element blocks b of (float)isum_b * (dw_b * dx_b) in order.
float dot_q8_0(const uint8_t* row, const ActQ8& a, size_t cols) {
  float acc = 0.0f;
  for (size_t b = 0; b < cols / 32; ++b, row += 34) {
    int32_t isum = 0;
    for (int j = 0; j < 32; ++j) isum += static_cast<int8_t>(row[2 + j]) * a.q[b * 32 + j];
    acc += static_cast<float>(isum) * (f16(row) * a.d[b]);
  }
  return acc;
}

// Q4_0, Q4_1, Q5_0 and Q5_1, per block of 32: a 4-bit low part per element (two per byte of
// qs), for Q5 a fifth bit from the 32-bit qh. The _0 types centre q on 0 (minus 8 or 16); the _1
// types add the block minimum m instead: (float)isum * (dw * dx) [+ m * (dx * sum q)].
template <bool kFive, bool kMin>
float dot_q4_q5(const uint8_t* row, const ActQ8& a, size_t cols) {
  constexpr size_t kHeader = kMin ? 4 : 2;  // f16 d, and f16 m for the _1 types
  constexpr size_t kQs = kHeader + (kFive ? 4 : 0);
  constexpr int kOffset = kMin ? 0 : (kFive ? 16 : 8);
  float acc = 0.0f;
  for (size_t b = 0; b < cols / 32; ++b, row += kQs + 16) {
    const int8_t* q = a.q + b * 32;
    uint32_t qh = 0;
    if (kFive) std::memcpy(&qh, row + kHeader, 4);
    const uint8_t* qs = row + kQs;
    int32_t isum = 0;
    for (int j = 0; j < 16; ++j) {
      const int lo = ((qs[j] & 0xF) | static_cast<int>(((qh >> j) & 1u) << 4)) - kOffset;
      const int hi = ((qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4)) - kOffset;
      isum += lo * q[j] + hi * q[j + 16];
    }
    float v = static_cast<float>(isum) * (f16(row) * a.d[b]);
    if (kMin) v += f16(row + 2) * a.s32[b];
    acc += v;
  }
  return acc;
}

// Q4_K / Q5_K: per sub-block j of 32: (float)isum_j * (d * sc_j * dx_j) - (dmin * m_j) * s32_j.
template <bool kFive>
float dot_k45(const uint8_t* row, const ActQ8& a, size_t cols) {
  constexpr size_t kBytes = kFive ? 176 : 144;
  float acc = 0.0f;
  for (size_t b = 0; b < cols / 256; ++b, row += kBytes) {
    const float d = f16(row);
    const float dmin = f16(row + 2);
    const uint8_t* qh = row + 16;
    const uint8_t* qs = kFive ? row + 48 : row + 16;
    for (int j = 0; j < 8; ++j) {
      uint8_t sc, m;
      quant::k_scale_min(row + 4, j, &sc, &m);
      const size_t ab = b * 8 + static_cast<size_t>(j);
      const int8_t* q = a.q + ab * 32;
      const uint8_t* w = qs + (j / 2) * 32;
      const int shift = (j % 2) * 4;
      int32_t isum = 0;
      for (int l = 0; l < 32; ++l) {
        int v = (w[l] >> shift) & 0xF;
        if (kFive) v |= ((qh[l] >> j) & 1) << 4;
        isum += v * q[l];
      }
      acc += static_cast<float>(isum) * ((d * static_cast<float>(sc)) * a.d[ab]) -
             (dmin * static_cast<float>(m)) * a.s32[ab];
    }
  }
  return acc;
}

// Q6_K: per 32 elements (two sub-blocks of 16 with int8 scales sc_a, sc_b):
// isum = sc_a * sum_a((q - 32) x) + sc_b * sum_b((q - 32) x), exact; acc += isum * (d * dx).
float dot_q6_k(const uint8_t* row, const ActQ8& a, size_t cols) {
  float acc = 0.0f;
  for (size_t b = 0; b < cols / 256; ++b, row += 210) {
    const uint8_t* ql = row;
    const uint8_t* qh = row + 128;
    const auto* sc = reinterpret_cast<const int8_t*>(row + 192);
    const float d = f16(row + 208);
    for (int blk = 0; blk < 8; ++blk) {
      const size_t ab = b * 8 + static_cast<size_t>(blk);
      const int8_t* q = a.q + ab * 32;
      int32_t isum = 0;
      for (int half = 0; half < 2; ++half) {
        int32_t s = 0;
        for (int e = 0; e < 16; ++e) {
          const int i = blk * 32 + half * 16 + e;
          const int h = i / 128, r = i % 128, g = r / 32, l = r % 32;
          const int lo = (ql[h * 64 + (g & 1) * 32 + l] >> (g >= 2 ? 4 : 0)) & 0xF;
          const int hi = (qh[h * 32 + l] >> (2 * g)) & 3;
          s += ((lo | (hi << 4)) - 32) * q[half * 16 + e];
        }
        isum += sc[blk * 2 + half] * s;
      }
      acc += static_cast<float>(isum) * (d * a.d[ab]);
    }
  }
  return acc;
}

}  // namespace

// Q2_K: per sub-block s of 16 (half h of activation block ab): (float)isum_s * ((d * sc_s) *
// dx_ab) - (dmin * m_s) * s16_{2 ab + h}, the sub-blocks in order.
float dot_q2_k(const uint8_t* row, const ActQ8& a, size_t cols) {
  float acc = 0.0f;
  for (size_t b = 0; b < cols / 256; ++b, row += 84) {
    const float d = f16(row + 80);
    const float dmin = f16(row + 82);
    for (int s = 0; s < 16; ++s) {
      const size_t ab = b * 8 + static_cast<size_t>(s / 2);
      const int8_t* q = a.q + b * 256 + static_cast<size_t>(s) * 16;
      const uint8_t* w = row + 16 + 32 * (s / 8) + 16 * (s % 2);
      const int shift = 2 * ((s % 8) / 2);
      int32_t isum = 0;
      for (int l = 0; l < 16; ++l) isum += ((w[l] >> shift) & 3) * q[l];
      acc += static_cast<float>(isum) * ((d * static_cast<float>(row[s] & 0xF)) * a.d[ab]) -
             (dmin * static_cast<float>(row[s] >> 4)) * a.s16[2 * ab + static_cast<size_t>(s % 2)];
    }
  }
  return acc;
}

// Q3_K: per 32 elements (two sub-blocks with 6-bit scales sc_a, sc_b), as Q6_K:
// isum = (sc_a - 32) sum_a(q x) + (sc_b - 32) sum_b(q x), exact; acc += isum * (d * dx).
float dot_q3_k(const uint8_t* row, const ActQ8& a, size_t cols) {
  float acc = 0.0f;
  for (size_t b = 0; b < cols / 256; ++b, row += 110) {
    const float d = f16(row + 108);
    for (int blk = 0; blk < 8; ++blk) {
      const size_t ab = b * 8 + static_cast<size_t>(blk);
      int32_t isum = 0;
      for (int half = 0; half < 2; ++half) {
        const int s = 2 * blk + half;
        const int8_t* q = a.q + ab * 32 + static_cast<size_t>(half) * 16;
        const uint8_t* w = row + 32 + 32 * (s / 8) + 16 * (s % 2);
        const uint8_t* hm = row + 16 * (s % 2);
        const int shift = 2 * ((s % 8) / 2);
        int32_t sum = 0;
        for (int l = 0; l < 16; ++l) {
          const int v = ((w[l] >> shift) & 3) - (((hm[l] >> (s / 2)) & 1) != 0 ? 0 : 4);
          sum += v * q[l];
        }
        isum += (quant::q3_k_scale(row + 96, s) - 32) * sum;
      }
      acc += static_cast<float>(isum) * (d * a.d[ab]);
    }
  }
  return acc;
}

namespace {

// FP8: per 128-column block k: partial = sum fp8 * x in order; acc += partial * scale_k.
float dot_fp8(const uint8_t* row, const float* scales, const float* x, size_t cols) {
  float acc = 0.0f;
  for (size_t k = 0; k * kFp8ScaleBlock < cols; ++k) {
    float partial = 0.0f;
    const size_t end = std::min(cols, (k + 1) * kFp8ScaleBlock);
    for (size_t c = k * kFp8ScaleBlock; c < end; ++c) {
      partial += quant::fp8_e4m3_to_f32(row[c]) * x[c];
    }
    acc += partial * scales[k];
  }
  return acc;
}

}  // namespace

namespace {
// Bytes of ActQ8::s8: 16 int16 per group of four blocks (a partial group padded with zeros).
size_t s8_bytes(size_t n) {
  return align64((n / 32 + 3) / 4 * 16 * sizeof(int16_t));
}
}  // namespace

size_t act_bytes(size_t n) {
  return align64(n) + 2 * align64(n / 32 * sizeof(float)) + align64(n / 16 * sizeof(float)) +
         2 * align64(n / 4 * sizeof(float)) + align64(n) + s8_bytes(n) + align64(n);
}

int8_t* act_qy(void* scratch, size_t n) {
  return reinterpret_cast<int8_t*>(act_s8(scratch, n)) - align64(n);
}

void interleave_y(const int8_t* q, size_t n, int8_t* qy) {
  for (size_t g = 0; g + 128 <= n; g += 128) {
    for (size_t e = 0; e < 128; ++e) {
      const size_t c = e / 32, h = e % 32 / 16, s = e % 16 / 4, o = e % 4 / 2, t = e % 2;
      qy[g + e] = q[g + 32 * s + 16 * h + 8 * o + 2 * c + t];
    }
  }
}

int16_t* act_s8(void* scratch, size_t n) {
  return reinterpret_cast<int16_t*>(act_qk(scratch, n) - s8_bytes(n));
}

void octet_sums(const int32_t* nq4, size_t n, int16_t* s8) {
  const size_t blocks = n / 32;
  const size_t groups = (blocks + 3) / 4;
  for (size_t g = 0; g < groups; ++g) {
    for (size_t e = 0; e < 16; ++e) {
      const size_t h = e / 8, j = e % 8 / 2, t = e % 2;
      const size_t quad = 8 * (4 * g + j) + 4 * h + 2 * t;  // elements 4 quad .. 4 quad + 7
      s8[16 * g + e] = 4 * g + j < blocks ? static_cast<int16_t>(-(nq4[quad] + nq4[quad + 1])) : 0;
    }
  }
}

int8_t* act_qk(void* scratch, size_t n) {
  return static_cast<int8_t*>(scratch) + act_bytes(n) - align64(n);
}

void interleave_k(const int8_t* q, size_t n, int8_t* qk) {
  for (size_t b = 0; b + 256 <= n; b += 256) {
    for (size_t c = 0; c < 4; ++c) {
      for (size_t k = 0; k < 16; ++k)
        std::memcpy(qk + b + 64 * c + 4 * k, q + b + 16 * k + 4 * c, 4);
    }
  }
}

namespace {
struct ActLayout {
  int8_t* q;
  float* d;
  float* s32;
  float* s16;
  float* d8;
  int32_t* nq4;
};
ActLayout carve(size_t n, void* scratch) {
  auto* base = static_cast<uint8_t*>(scratch);
  ActLayout l;
  l.q = reinterpret_cast<int8_t*>(base);
  base += align64(n);
  l.d = reinterpret_cast<float*>(base);
  base += align64(n / 32 * sizeof(float));
  l.s32 = reinterpret_cast<float*>(base);
  base += align64(n / 32 * sizeof(float));
  l.s16 = reinterpret_cast<float*>(base);
  base += align64(n / 16 * sizeof(float));
  l.d8 = reinterpret_cast<float*>(base);
  base += align64(n / 4 * sizeof(float));
  l.nq4 = reinterpret_cast<int32_t*>(base);
  return l;
}
}  // namespace

ActQ8 quantize_act_scalar(const float* x, size_t n, void* scratch) {
  const ActLayout l = carve(n, scratch);
  for (size_t b = 0; b < n / 32; ++b) {
    const float* xb = x + b * 32;
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) {
      const float a = std::fabs(xb[j]);
      amax = a > amax ? a : amax;
    }
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    int32_t sum[2] = {0, 0};
    for (int j = 0; j < 32; ++j) {
      // Nearest, ties to even (as cvtps2dq); |x * id| <= 127 up to rounding.
      // Clamped so that inf / NaN inputs keep the conversion defined (finite inputs never
      // exceed 127 by more than rounding, so the clamp changes nothing for them).
      const float v = xb[j] * id;
      const auto q =
          static_cast<int32_t>(std::nearbyint(v == v ? std::clamp(v, -127.0f, 127.0f) : 0.0f));
      l.q[b * 32 + j] = static_cast<int8_t>(q);
      sum[j / 16] += q;
    }
    l.d[b] = d;
    l.s32[b] = d * static_cast<float>(sum[0] + sum[1]);
    l.s16[2 * b] = d * static_cast<float>(sum[0]);
    l.s16[2 * b + 1] = d * static_cast<float>(sum[1]);
    for (int k = 0; k < 8; ++k) {
      const int8_t* quad = l.q + b * 32 + 4 * k;
      l.d8[b * 8 + k] = d;
      l.nq4[b * 8 + k] = -(quad[0] + quad[1] + quad[2] + quad[3]);
    }
  }
  int8_t* qk = act_qk(scratch, n);
  interleave_k(l.q, n, qk);
  int16_t* s8 = act_s8(scratch, n);
  octet_sums(l.nq4, n, s8);
  int8_t* qy = act_qy(scratch, n);
  interleave_y(l.q, n, qy);
  return ActQ8{l.q, l.d, l.s32, l.s16, l.d8, l.nq4, qk, s8, qy};
}

const QuantOps& scalar_quant_ops() {
  static const QuantOps ops{
      quantize_act_scalar,
      {dot_q8_0, dot_q4_q5<false, false>, dot_q4_q5<false, true>, dot_q4_q5<true, false>,
       dot_q4_q5<true, true>, dot_k45<false>, dot_k45<true>, dot_q6_k, dot_q2_k, dot_q3_k},
      dot_fp8,
  };
  return ops;
}

void quant_matmul_rows(const QuantOps& ops, const Matrix& w, const float* x, size_t x_stride,
                       size_t n, float* y, size_t y_stride, size_t y_row0, size_t row_begin,
                       size_t row_end, const MatvecParams& p) {
  if (row_begin >= row_end || n == 0) return;
  const auto* data = static_cast<const uint8_t*>(w.data);
  auto finish = [&](float* out, float v) {
    *out = p.accumulate ? *out + p.scale * v : p.scale * v;
  };
  if (w.dtype == DType::kF8E4M3) {
    SM_ASSERT(w.scales != nullptr);
    const size_t ss = w.scale_row_stride();
    for (size_t r = row_begin; r < row_end; ++r) {
      const uint8_t* row = data + r * w.stride();
      const float* sc = w.scales + (r / kFp8ScaleBlock) * ss;
      for (size_t i = 0; i < n; ++i) {
        finish(y + i * y_stride + (r - y_row0), ops.dot_fp8(row, sc, x + i * x_stride, w.cols));
      }
    }
    return;
  }
  SM_ASSERT(w.cols % dtype_block_elements(w.dtype) == 0 && w.cols % 32 == 0);
  const ActQ8* given = p.quantized_inputs;  // matmul() quantized them once for every chunk
  const size_t per = act_bytes(w.cols);
  auto* scratch = given != nullptr
                      ? nullptr
                      : static_cast<uint8_t*>(thread_scratch(std::min<size_t>(n, 64) * per, 2));
  // The activations of all n inputs (n == 1 for decode). Tiny next to the weights.
  constexpr size_t kMaxStack = 64;
  ActQ8 stack[kMaxStack];
  const size_t type = static_cast<size_t>(w.dtype) - static_cast<size_t>(DType::kQ8_0);
  const QuantDotFn dot = ops.dot[type];
  const size_t stride_bytes = row_bytes(w.dtype, w.stride());
  if (n == 1 && ops.rows[type] != nullptr) {
    const ActQ8 a = given != nullptr ? given[0] : ops.quantize_act(x, w.cols, scratch);
    ops.rows[type](data, stride_bytes, row_begin, row_end, a, w.cols, y + (row_begin - y_row0), p);
    return;
  }
  for (size_t i0 = 0; i0 < n; i0 += kMaxStack) {
    const size_t ni = std::min(kMaxStack, n - i0);
    const ActQ8* in = stack;
    if (given != nullptr) {
      in = given + i0;
    } else {
      for (size_t i = 0; i < ni; ++i) {
        stack[i] = ops.quantize_act(x + (i0 + i) * x_stride, w.cols, scratch + i * per);
      }
    }
    // Each row against the inputs in tiles of 8 and one tile of the rest (the largest size the
    // type has a kernel for, then singly): a tile unpacks the row once for all its inputs, and
    // gives each the single-input kernel's bits. The row stays in L1 across its inputs.
    const QuantTileFn* tiles = ops.tile[type];
    for (size_t r = row_begin; r < row_end; ++r) {
      const uint8_t* row = data + r * stride_bytes;
      float tile_out[kMaxTileInputs];
      for (size_t i = 0; i < ni;) {
        size_t k = std::min(kMaxTileInputs, ni - i);
        while (k > 1 && tiles[k - 1] == nullptr) --k;
        if (tiles[k - 1] == nullptr) {  // k == 1: no tile kernel
          finish(y + (i0 + i) * y_stride + (r - y_row0), dot(row, in[i], w.cols));
        } else {
          tiles[k - 1](row, in + i, w.cols, tile_out);
          for (size_t j = 0; j < k; ++j) {
            finish(y + (i0 + i + j) * y_stride + (r - y_row0), tile_out[j]);
          }
        }
        i += k;
      }
    }
  }
}

}  // namespace steermoe::kernels::detail
