// Quantizers (f32 -> blocks). Deterministic, scalar, not a hot path.
//
// Q8_0, Q4_0, Q4_1, Q5_0, Q5_1: ggml's reference rounding (the same as the `gguf` package's numpy
//   quantize_blocks): Q8_0 d = max|x| / 127, q = round(x / d); Q4_0 / Q5_0 d = (the x of largest
//   magnitude) / -8 (/ -16), q = trunc(x / d + 8.5) clamped; Q4_1 / Q5_1 d = (max - min) / 15 (/
//   31), m = min, q = trunc((x - min) / d + 0.5) clamped.
// Q4_K / Q5_K: per sub-block of 32, an affine fit x ~ s * q - m (q in [0, 15] or [0, 31], m >= 0)
//   by a scale search: 21 candidate inverse scales (nmax + 0.1 k) / (max - min) around the
//   range-based one, each rounded to nearest and refitted by least squares (s and m jointly,
//   m clamped to >= 0); the candidate with the smallest squared error wins. Then the super-block
//   scales d = max s / 63 and dmin = max m / 63 (f16), the 6-bit sc = round(s / d) and
//   m6 = round(m / dmin), and every q is re-rounded against the final (d * sc, dmin * m6).
// Q6_K: per sub-block of 16, a symmetric fit x ~ s * q (q in [-32, 31]) by the same search over
//   19 candidates around 32 / max|x| with least-squares refit; then d = max|s| / 127 (f16), int8
//   scales round(s / d), and q re-rounded against d * scale.
// None of this is llama.cpp's importance-weighted search (no imatrix); errors are a few percent
// larger than llama.cpp's at equal size.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/error.hpp"
#include "quant/fits.hpp"
#include "quant/quant.hpp"

namespace steermoe::quant {
namespace {

void store_f16(uint8_t* p, float v) {
  const uint16_t h = f32_to_f16(v);
  std::memcpy(p, &h, 2);
}

int nearest(float v) {
  return static_cast<int>(std::lround(v));
}

void quantize_q8_0(const float* x, uint8_t* b) {
  float amax = 0.0f;
  for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  store_f16(b, d);
  for (int j = 0; j < 32; ++j) {
    const float q = std::round(x[j] * id);
    b[2 + j] = static_cast<uint8_t>(
        static_cast<int8_t>(std::isnan(q) ? 0.0f : std::clamp(q, -128.0f, 127.0f)));
  }
}

// Q4_0 / Q5_0: returns q in [0, 2 * half) for 32 values, scale into *d.
void quantize_symmetric(const float* x, int half, float* d_out, int* q) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < 32; ++j) {
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  const float d = max / static_cast<float>(-half);
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  for (int j = 0; j < 32; ++j) {
    const float v = std::trunc(x[j] * id + (static_cast<float>(half) + 0.5f));
    q[j] = std::clamp(static_cast<int>(std::isnan(v) ? 0.0f : std::clamp(v, -1.0f, 64.0f)), 0,
                      2 * half - 1);
  }
  *d_out = d;
}

void quantize_affine(const float* x, int nmax, float* d_out, float* m_out, int* q) {
  float min = x[0], max = x[0];
  for (int j = 1; j < 32; ++j) {
    min = std::min(min, x[j]);
    max = std::max(max, x[j]);
  }
  const float d = (max - min) / static_cast<float>(nmax);
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  for (int j = 0; j < 32; ++j) {
    const float v = std::trunc((x[j] - min) * id + 0.5f);
    q[j] =
        std::clamp(static_cast<int>(std::isnan(v) ? 0.0f : std::clamp(v, -1.0f, 64.0f)), 0, nmax);
  }
  *d_out = d;
  *m_out = min;
}

void pack_nibbles(const int* q, uint8_t* qs) {
  for (int j = 0; j < 16; ++j)
    qs[j] = static_cast<uint8_t>((q[j] & 0xF) | ((q[j + 16] & 0xF) << 4));
}
void pack_high_bits(const int* q, uint8_t* qh4) {
  uint32_t qh = 0;
  for (int j = 0; j < 32; ++j) qh |= static_cast<uint32_t>((q[j] >> 4) & 1) << j;
  std::memcpy(qh4, &qh, 4);
}

void quantize_k45(const float* x, uint8_t* b, bool five) {
  const int nmax = five ? 31 : 15;
  float s[8], m[8];
  for (int j = 0; j < 8; ++j) fit_scale_min(x + 32 * j, 32, nmax, &s[j], &m[j]);
  float max_s = 0.0f, max_m = 0.0f;
  for (int j = 0; j < 8; ++j) {
    max_s = std::max(max_s, s[j]);
    max_m = std::max(max_m, m[j]);
  }
  const float d = f16_to_f32(f32_to_f16(max_s / 63.0f));
  const float dmin = f16_to_f32(f32_to_f16(max_m / 63.0f));
  store_f16(b, d);
  store_f16(b + 2, dmin);
  uint8_t sc[8], mm[8];
  for (int j = 0; j < 8; ++j) {
    sc[j] = static_cast<uint8_t>(d > 0.0f ? std::clamp(nearest(s[j] / d), 0, 63) : 0);
    mm[j] = static_cast<uint8_t>(dmin > 0.0f ? std::clamp(nearest(m[j] / dmin), 0, 63) : 0);
  }
  uint8_t* scales = b + 4;
  for (int j = 0; j < 4; ++j) {
    scales[j] = static_cast<uint8_t>(sc[j] | ((sc[j + 4] >> 4) << 6));
    scales[j + 4] = static_cast<uint8_t>(mm[j] | ((mm[j + 4] >> 4) << 6));
    scales[j + 8] = static_cast<uint8_t>((sc[j + 4] & 0xF) | ((mm[j + 4] & 0xF) << 4));
  }
  uint8_t* qh = b + 16;
  uint8_t* qs = five ? b + 48 : b + 16;
  if (five) std::memset(qh, 0, 32);
  std::memset(qs, 0, 128);
  for (int j = 0; j < 8; ++j) {
    const float d1 = d * static_cast<float>(sc[j]);
    const float m1 = dmin * static_cast<float>(mm[j]);
    for (int l = 0; l < 32; ++l) {
      int q = 0;
      if (d1 > 0.0f) {
        const float v = (x[32 * j + l] + m1) / d1;
        q = std::isnan(v) ? 0 : std::clamp(nearest(std::clamp(v, -1.0f, 64.0f)), 0, nmax);
      }
      qs[(j / 2) * 32 + l] |= static_cast<uint8_t>((q & 0xF) << ((j % 2) * 4));
      if (five) qh[l] |= static_cast<uint8_t>(((q >> 4) & 1) << j);
    }
  }
}

// The 16 sub-blocks of 16 of a K super-block fitted as s q with q in [-nmax, nmax - 1]
// (fit_symmetric), and the super-block scale d (f16) that brings the largest |s| to `levels`.
float fit_sub_scales(const float* x, int nmax, float levels, float* s) {
  float amax = 0.0f;
  for (int k = 0; k < 16; ++k) {
    s[k] = fit_symmetric(x + 16 * k, 16, nmax);
    amax = std::max(amax, std::fabs(s[k]));
  }
  return f16_to_f32(f32_to_f16(amax / levels));
}

void quantize_q6_k(const float* x, uint8_t* b) {
  float s[16];
  const float d = fit_sub_scales(x, 32, 127.0f, s);
  uint8_t* ql = b;
  uint8_t* qh = b + 128;
  auto* sc = reinterpret_cast<int8_t*>(b + 192);
  store_f16(b + 208, d);
  std::memset(ql, 0, 192);
  for (int k = 0; k < 16; ++k) {
    sc[k] = static_cast<int8_t>(d > 0.0f ? std::clamp(nearest(s[k] / d), -127, 127) : 0);
  }
  for (int i = 0; i < 256; ++i) {
    const float dk = d * static_cast<float>(sc[i / 16]);
    int q = 0;
    if (dk != 0.0f) {
      const float v = x[i] / dk;
      q = std::isnan(v) ? 0 : std::clamp(nearest(std::clamp(v, -64.0f, 64.0f)), -32, 31);
    }
    q += 32;
    const int h = i / 128, r = i % 128, g = r / 32, l = r % 32;
    ql[h * 64 + (g & 1) * 32 + l] |= static_cast<uint8_t>((q & 0xF) << (g >= 2 ? 4 : 0));
    qh[h * 32 + l] |= static_cast<uint8_t>(((q >> 4) & 3) << (2 * g));
  }
}

// The byte and shift of element i's 2 low bits in a Q2_K / Q3_K block's qs (quant.hpp).
inline int k23_byte(int i) {
  const int s = i / 16;
  return 32 * (s / 8) + 16 * (s % 2) + i % 16;
}
inline int k23_shift(int i) {
  return 2 * (((i / 16) % 8) / 2);
}

// Q2_K: each sub-block of 16 fitted as s q - m (q in [0, 3], m >= 0, as Q4_K's sub-blocks), the
// 16 scales and mins in 4 bits under the super-block's d and dmin.
void quantize_q2_k(const float* x, uint8_t* b) {
  float s[16], m[16];
  float max_s = 0.0f, max_m = 0.0f;
  for (int k = 0; k < 16; ++k) {
    fit_scale_min(x + 16 * k, 16, 3, &s[k], &m[k]);
    max_s = std::max(max_s, s[k]);
    max_m = std::max(max_m, m[k]);
  }
  const float d = f16_to_f32(f32_to_f16(max_s / 15.0f));
  const float dmin = f16_to_f32(f32_to_f16(max_m / 15.0f));
  uint8_t* qs = b + 16;
  std::memset(qs, 0, 64);
  for (int k = 0; k < 16; ++k) {
    const int sc = d > 0.0f ? std::clamp(nearest(s[k] / d), 0, 15) : 0;
    const int mm = dmin > 0.0f ? std::clamp(nearest(m[k] / dmin), 0, 15) : 0;
    b[k] = static_cast<uint8_t>(sc | (mm << 4));
  }
  store_f16(b + 80, d);
  store_f16(b + 82, dmin);
  for (int i = 0; i < 256; ++i) {
    const float d1 = d * static_cast<float>(b[i / 16] & 0xF);
    const float m1 = dmin * static_cast<float>(b[i / 16] >> 4);
    int q = 0;
    if (d1 > 0.0f) {
      const float v = (x[i] + m1) / d1;
      q = std::isnan(v) ? 0 : std::clamp(nearest(std::clamp(v, -1.0f, 4.0f)), 0, 3);
    }
    qs[k23_byte(i)] |= static_cast<uint8_t>(q << k23_shift(i));
  }
}

// Q3_K: each sub-block of 16 fitted as s q (q in [-4, 3], as Q6_K's), the 16 scales in 6 bits
// (signed, stored + 32) under the super-block's d.
void quantize_q3_k(const float* x, uint8_t* b) {
  float s[16];
  const float d = fit_sub_scales(x, 4, 31.0f, s);
  uint8_t* hmask = b;
  uint8_t* qs = b + 32;
  uint8_t* scales = b + 96;
  std::memset(b, 0, 108);
  int sc[16];
  for (int k = 0; k < 16; ++k) {
    sc[k] = d > 0.0f ? std::clamp(nearest(s[k] / d), -32, 31) : 0;
    const int u = sc[k] + 32;  // 6 bits
    scales[k % 8] |= static_cast<uint8_t>((u & 0xF) << (k >= 8 ? 4 : 0));
    scales[8 + k % 4] |= static_cast<uint8_t>((u >> 4) << (2 * (k / 4)));
  }
  store_f16(b + 108, d);
  for (int i = 0; i < 256; ++i) {
    const float dk = d * static_cast<float>(sc[i / 16]);
    int q = 0;
    if (dk != 0.0f) {
      const float v = x[i] / dk;
      q = std::isnan(v) ? 0 : std::clamp(nearest(std::clamp(v, -8.0f, 8.0f)), -4, 3);
    }
    const int u = q + 4;  // low 2 bits in qs, bit 2 in hmask (set: no -4)
    qs[k23_byte(i)] |= static_cast<uint8_t>((u & 3) << k23_shift(i));
    hmask[16 * ((i / 16) % 2) + i % 16] |= static_cast<uint8_t>((u >> 2) << ((i / 16) / 2));
  }
}

}  // namespace

void quantize_row(Type type, const float* x, void* dst, size_t n) {
  const TypeInfo& t = info(type);
  SM_ASSERT(n % t.block_elements == 0 && type != Type::kF8E4M3);
  auto* b = static_cast<uint8_t*>(dst);
  const size_t nb = n / t.block_elements;
  int q[32];
  for (size_t i = 0; i < nb; ++i, x += t.block_elements, b += t.block_bytes) {
    float d = 0.0f, m = 0.0f;
    switch (type) {
      case Type::kQ8_0:
        quantize_q8_0(x, b);
        break;
      case Type::kQ4_0:
        quantize_symmetric(x, 8, &d, q);
        store_f16(b, d);
        pack_nibbles(q, b + 2);
        break;
      case Type::kQ5_0:
        quantize_symmetric(x, 16, &d, q);
        store_f16(b, d);
        pack_high_bits(q, b + 2);
        pack_nibbles(q, b + 6);
        break;
      case Type::kQ4_1:
        quantize_affine(x, 15, &d, &m, q);
        store_f16(b, d);
        store_f16(b + 2, m);
        pack_nibbles(q, b + 4);
        break;
      case Type::kQ5_1:
        quantize_affine(x, 31, &d, &m, q);
        store_f16(b, d);
        store_f16(b + 2, m);
        pack_high_bits(q, b + 4);
        pack_nibbles(q, b + 8);
        break;
      case Type::kQ4_K:
        quantize_k45(x, b, false);
        break;
      case Type::kQ5_K:
        quantize_k45(x, b, true);
        break;
      case Type::kQ6_K:
        quantize_q6_k(x, b);
        break;
      case Type::kQ2_K:
        quantize_q2_k(x, b);
        break;
      case Type::kQ3_K:
        quantize_q3_k(x, b);
        break;
      case Type::kF8E4M3:
        break;
    }
  }
}

}  // namespace steermoe::quant
