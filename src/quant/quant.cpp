#include "quant/quant.hpp"

#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "common/error.hpp"

namespace steermoe::quant {
namespace {

constexpr std::array<TypeInfo, kTypeCount> kInfo = {{
    {Type::kQ8_0, "Q8_0", 8, 32, 34},
    {Type::kQ4_0, "Q4_0", 2, 32, 18},
    {Type::kQ4_1, "Q4_1", 3, 32, 20},
    {Type::kQ5_0, "Q5_0", 6, 32, 22},
    {Type::kQ5_1, "Q5_1", 7, 32, 24},
    {Type::kQ4_K, "Q4_K", 12, 256, 144},
    {Type::kQ5_K, "Q5_K", 13, 256, 176},
    {Type::kQ6_K, "Q6_K", 14, 256, 210},
    {Type::kQ2_K, "Q2_K", 10, 256, 84},
    {Type::kQ3_K, "Q3_K", 11, 256, 110},
    {Type::kF8E4M3, "F8_E4M3", 0, 1, 1},
}};

uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
float load_f16(const uint8_t* p) {
  return f16_to_f32(load_u16(p));
}

}  // namespace

const TypeInfo& info(Type type) {
  const auto i = static_cast<size_t>(type);
  SM_ASSERT(i < kInfo.size());
  return kInfo[i];
}
std::string_view name(Type type) {
  return info(type).name;
}

std::optional<Type> from_ggml_id(uint32_t id) {
  for (const auto& t : kInfo) {
    if (t.ggml_id == id && t.type != Type::kF8E4M3) return t.type;
  }
  return std::nullopt;
}

std::optional<Type> from_name(std::string_view name) {
  for (const auto& t : kInfo) {
    if (t.name.size() != name.size()) continue;
    bool same = true;
    for (size_t i = 0; i < name.size(); ++i) {
      char a = name[i];
      if (a >= 'a' && a <= 'z') a = static_cast<char>(a - 'a' + 'A');
      same = same && a == t.name[i];
    }
    if (same) return t.type;
  }
  return std::nullopt;
}

size_t bytes_for(Type type, size_t elements) {
  const TypeInfo& t = info(type);
  SM_ASSERT(elements % t.block_elements == 0);
  return elements / t.block_elements * t.block_bytes;
}

float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0) {
    const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
    return sign != 0 ? -magnitude : magnitude;
  }
  if (exponent == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  return std::bit_cast<float>(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

uint16_t f32_to_f16(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  const auto sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude >= 0x7f800000u) {
    if (magnitude == 0x7f800000u) return sign | 0x7c00u;
    return static_cast<uint16_t>(sign | 0x7e00u | ((magnitude >> 13) & 0x3ffu));
  }
  if (magnitude >= 0x477ff000u) return sign | 0x7c00u;
  if (magnitude < 0x38800000u) {
    if (magnitude < 0x33000000u) return sign;
    const uint32_t exponent = magnitude >> 23;
    const uint32_t mant = (magnitude & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126u - exponent;
    uint32_t result = mant >> shift;
    const uint32_t remainder = mant & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1u);
    if (remainder > half || (remainder == half && (result & 1u))) ++result;
    return static_cast<uint16_t>(sign | result);
  }
  const uint32_t exponent = (magnitude >> 23) - 127u + 15u;
  const uint32_t mant = magnitude & 0x7fffffu;
  uint32_t result = (exponent << 10) | (mant >> 13);
  const uint32_t remainder = mant & 0x1fffu;
  if (remainder > 0x1000u || (remainder == 0x1000u && (result & 1u))) ++result;
  return static_cast<uint16_t>(sign | result);
}

float fp8_e4m3_to_f32(uint8_t b) {
  const bool negative = (b & 0x80u) != 0;
  const uint32_t e = (b >> 3) & 0xfu;
  const uint32_t m = b & 0x7u;
  float v;
  if (e == 15 && m == 7) {
    v = std::numeric_limits<float>::quiet_NaN();
  } else if (e == 0) {
    v = static_cast<float>(m) * 0x1p-9f;
  } else {
    v = std::ldexp(static_cast<float>(8 + m), static_cast<int>(e) - 10);
  }
  return negative ? -v : v;
}

uint8_t f32_to_fp8_e4m3(float f) {
  if (std::isnan(f)) return 0x7f;
  const uint8_t sign = std::signbit(f) ? 0x80 : 0x00;
  const float a = std::fabs(f);
  if (a >= 448.0f) return sign | 0x7e;  // saturate (448 = S.1111.110)
  int e = 0;
  std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1): the leading bit is 2^(e - 1)
  // Quantum of the binade (3 mantissa bits), or of the subnormals (2^-9) below 2^-6.
  const int quantum_exp = std::max(e - 1, -6) - 3;
  const float q = std::nearbyint(std::ldexp(a, -quantum_exp));  // ties to even; exact scaling
  const float v = std::ldexp(q, quantum_exp);
  if (v >= 448.0f) return sign | 0x7e;
  if (v < 0x1p-6f) return sign | static_cast<uint8_t>(q);  // subnormal codes 0..7
  int ve = 0;
  const float vm = std::frexp(v, &ve);  // v = vm * 2^ve, vm in [0.5, 1)
  const auto mant = static_cast<uint8_t>(vm * 16.0f - 8.0f);
  return sign | static_cast<uint8_t>(((ve - 1 + 7) << 3) | mant);
}

int q3_k_scale(const uint8_t* scales, int s) {
  const int low = s < 8 ? scales[s] & 0xF : scales[s - 8] >> 4;
  const int high = (scales[8 + s % 4] >> (2 * (s / 4))) & 3;
  return low | (high << 4);
}

void k_scale_min(const uint8_t* q, int j, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

void dequantize_row(Type type, const void* src, float* dst, size_t n) {
  const TypeInfo& t = info(type);
  SM_ASSERT(n % t.block_elements == 0);
  const auto* p = static_cast<const uint8_t*>(src);
  const size_t nb = n / t.block_elements;
  switch (type) {
    case Type::kQ8_0:
      for (size_t b = 0; b < nb; ++b, p += 34, dst += 32) {
        const float d = load_f16(p);
        for (int j = 0; j < 32; ++j) dst[j] = static_cast<float>(static_cast<int8_t>(p[2 + j])) * d;
      }
      return;
    case Type::kQ4_0:
      for (size_t b = 0; b < nb; ++b, p += 18, dst += 32) {
        const float d = load_f16(p);
        for (int j = 0; j < 16; ++j) {
          dst[j] = d * static_cast<float>((p[2 + j] & 0xF) - 8);
          dst[j + 16] = d * static_cast<float>((p[2 + j] >> 4) - 8);
        }
      }
      return;
    case Type::kQ4_1:
      for (size_t b = 0; b < nb; ++b, p += 20, dst += 32) {
        const float d = load_f16(p);
        const float m = load_f16(p + 2);
        for (int j = 0; j < 16; ++j) {
          dst[j] = d * static_cast<float>(p[4 + j] & 0xF) + m;
          dst[j + 16] = d * static_cast<float>(p[4 + j] >> 4) + m;
        }
      }
      return;
    case Type::kQ5_0:
    case Type::kQ5_1: {
      const bool has_min = type == Type::kQ5_1;
      const size_t bytes = has_min ? 24 : 22;
      for (size_t b = 0; b < nb; ++b, p += bytes, dst += 32) {
        const float d = load_f16(p);
        const float m = has_min ? load_f16(p + 2) : 0.0f;
        const uint8_t* q = p + (has_min ? 4 : 2);
        const uint32_t qh = load_u32(q);
        const uint8_t* qs = q + 4;
        for (int j = 0; j < 16; ++j) {
          const int lo = (qs[j] & 0xF) | static_cast<int>(((qh >> j) & 1u) << 4);
          const int hi = (qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
          if (has_min) {
            dst[j] = d * static_cast<float>(lo) + m;
            dst[j + 16] = d * static_cast<float>(hi) + m;
          } else {
            dst[j] = d * static_cast<float>(lo - 16);
            dst[j + 16] = d * static_cast<float>(hi - 16);
          }
        }
      }
      return;
    }
    case Type::kQ4_K:
    case Type::kQ5_K: {
      const bool five = type == Type::kQ5_K;
      for (size_t b = 0; b < nb; ++b, p += t.block_bytes, dst += 256) {
        const float d = load_f16(p);
        const float dmin = load_f16(p + 2);
        const uint8_t* scales = p + 4;
        const uint8_t* qh = p + 16;
        const uint8_t* qs = five ? p + 48 : p + 16;
        for (int j = 0; j < 8; ++j) {
          uint8_t sc, m;
          k_scale_min(scales, j, &sc, &m);
          const float d1 = d * static_cast<float>(sc);
          const float m1 = dmin * static_cast<float>(m);
          const uint8_t* q = qs + (j / 2) * 32;
          const int shift = (j % 2) * 4;
          for (int l = 0; l < 32; ++l) {
            int v = (q[l] >> shift) & 0xF;
            if (five) v |= ((qh[l] >> j) & 1) << 4;
            dst[j * 32 + l] = d1 * static_cast<float>(v) - m1;
          }
        }
      }
      return;
    }
    case Type::kQ6_K:
      for (size_t b = 0; b < nb; ++b, p += 210, dst += 256) {
        const uint8_t* ql = p;
        const uint8_t* qh = p + 128;
        const auto* sc = reinterpret_cast<const int8_t*>(p + 192);
        const float d = load_f16(p + 208);
        for (int i = 0; i < 256; ++i) {
          const int h = i / 128, r = i % 128, g = r / 32, l = r % 32;
          const int lo = (ql[h * 64 + (g & 1) * 32 + l] >> (g >= 2 ? 4 : 0)) & 0xF;
          const int hi = (qh[h * 32 + l] >> (2 * g)) & 3;
          dst[i] = (d * static_cast<float>(sc[i / 16])) * static_cast<float>((lo | (hi << 4)) - 32);
        }
      }
      return;
    case Type::kQ2_K:
      // scales[16] (4-bit scale | 4-bit min << 4), qs[64] (2 bits), f16 d, f16 dmin. Element e
      // of the block: sub-block s = e / 16, 2 bits of qs[32 (s / 8) + 16 (s % 2) + e % 16] at
      // shift 2 ((s % 8) / 2); value (d sc_s) q - (dmin m_s).
      for (size_t b = 0; b < nb; ++b, p += 84, dst += 256) {
        const float d = load_f16(p + 80);
        const float dmin = load_f16(p + 82);
        for (int i = 0; i < 256; ++i) {
          const int s = i / 16;
          const float dl = d * static_cast<float>(p[s] & 0xF);
          const float ml = dmin * static_cast<float>(p[s] >> 4);
          const int q = (p[16 + 32 * (s / 8) + 16 * (s % 2) + i % 16] >> (2 * ((s % 8) / 2))) & 3;
          dst[i] = dl * static_cast<float>(q) - ml;
        }
      }
      return;
    case Type::kQ3_K:
      // hmask[32], qs[64] (low 2 bits), scales[12] (16 x 6 bits, stored + 32), f16 d. Element e:
      // sub-block s = e / 16, low bits as Q2_K's (qs at byte 32), high bit (s / 2) of
      // hmask[16 (s % 2) + e % 16]; q = low - (high ? 0 : 4); value (d (sc_s - 32)) q.
      for (size_t b = 0; b < nb; ++b, p += 110, dst += 256) {
        const float d = load_f16(p + 108);
        for (int i = 0; i < 256; ++i) {
          const int s = i / 16, l = i % 16;
          const float dl = d * static_cast<float>(q3_k_scale(p + 96, s) - 32);
          const int low = (p[32 + 32 * (s / 8) + 16 * (s % 2) + l] >> (2 * ((s % 8) / 2))) & 3;
          const int high = (p[16 * (s % 2) + l] >> (s / 2)) & 1;
          dst[i] = dl * static_cast<float>(low - (high != 0 ? 0 : 4));
        }
      }
      return;
    case Type::kF8E4M3:
      for (size_t i = 0; i < n; ++i) dst[i] = fp8_e4m3_to_f32(p[i]);
      return;
  }
}

bool scales_finite(Type type, const void* src, size_t n) {
  const TypeInfo& t = info(type);
  SM_ASSERT(n % t.block_elements == 0);
  const auto* p = static_cast<const uint8_t*>(src);
  const size_t nb = n / t.block_elements;
  auto finite = [](uint16_t h) { return (h & 0x7c00u) != 0x7c00u; };
  for (size_t b = 0; b < nb; ++b, p += t.block_bytes) {
    switch (type) {
      case Type::kQ8_0:
      case Type::kQ4_0:
      case Type::kQ5_0:
        if (!finite(load_u16(p))) return false;
        break;
      case Type::kQ4_1:
      case Type::kQ5_1:
      case Type::kQ4_K:
      case Type::kQ5_K:
        if (!finite(load_u16(p)) || !finite(load_u16(p + 2))) return false;
        break;
      case Type::kQ6_K:
        if (!finite(load_u16(p + 208))) return false;
        break;
      case Type::kQ2_K:
        if (!finite(load_u16(p + 80)) || !finite(load_u16(p + 82))) return false;
        break;
      case Type::kQ3_K:
        if (!finite(load_u16(p + 108))) return false;
        break;
      case Type::kF8E4M3:
        if ((p[0] & 0x7fu) == 0x7fu) return false;
        break;
    }
  }
  return true;
}

}  // namespace steermoe::quant
