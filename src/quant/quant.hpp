// Block formats of quantized weight types: GGUF's Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K,
// Q6_K (ggml's byte layouts) and FP8 E4M3 (one byte per element, block scales kept separately).
//
// Everything here is scalar and defines the numbers: dequantize_row() is bit-identical to ggml's
// dequantize_row_* and to the `gguf` Python package's numpy dequantizers (tested against values
// that package produced). The quantizers are ours (see quantize.cpp for the algorithms).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace steermoe::quant {

// Q2_K and Q3_K (the 2- and 3-bit K-quants of llama.cpp's Q2_K / Q3_K_S/M/L files) come after
// Q6_K, so that every type's number keeps its meaning in the enums that mirror this one.
enum class Type : uint8_t {
  kQ8_0,
  kQ4_0,
  kQ4_1,
  kQ5_0,
  kQ5_1,
  kQ4_K,
  kQ5_K,
  kQ6_K,
  kQ2_K,
  kQ3_K,
  kF8E4M3
};
inline constexpr size_t kTypeCount = 11;

struct TypeInfo {
  Type type;
  std::string_view name;  // "Q4_K", "F8_E4M3"
  uint32_t ggml_id;       // ggml type number (0 for FP8: not a GGUF type)
  size_t block_elements;  // 32, 256 (1 for FP8)
  size_t block_bytes;     // 34, 144, ...
};

const TypeInfo& info(Type type);
std::string_view name(Type type);
std::optional<Type> from_ggml_id(uint32_t id);
// Case-insensitive ("q4_k", "Q8_0").
std::optional<Type> from_name(std::string_view name);

// Bytes of `elements` elements; elements must be a multiple of the block (SM_ASSERT).
size_t bytes_for(Type type, size_t elements);

// f16 / FP8 E4M3 (the "fn" variant: bias 7, no infinities, S.1111.111 is NaN, max 448).
float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);  // round to nearest even
float fp8_e4m3_to_f32(uint8_t b);
uint8_t f32_to_fp8_e4m3(float f);  // round to nearest even, saturating to +-448; NaN -> 0x7f

// dst[0, n) = the values of the n elements at src (n a multiple of the block). FP8 gives the raw
// E4M3 values (block scales are applied by the caller).
void dequantize_row(Type type, const void* src, float* dst, size_t n);

// Encodes n floats (a multiple of the block) into dst (bytes_for(type, n) bytes). Not for FP8.
// Round to nearest with a scale search (quantize.cpp); deterministic.
void quantize_row(Type type, const float* src, void* dst, size_t n);

// True if every block scale (f16 d / dmin / m) in the n elements at src is finite.
bool scales_finite(Type type, const void* src, size_t n);

// ---- Byte layouts (ggml's block_* structs; little-endian, packed) --------------------------
inline constexpr size_t kQK = 32;    // block of the _0 / _1 types
inline constexpr size_t kQKK = 256;  // super-block of the K types
// Q8_0: f16 d, int8 qs[32]                                 w = d * q
// Q4_0: f16 d, uint8 qs[16] (lo nibbles 0..15, hi 16..31)  w = d * (q - 8)
// Q4_1: f16 d, f16 m, qs[16]                               w = d * q + m
// Q5_0: f16 d, uint32 qh (bit j: 5th bit of element j), qs[16]   w = d * (q - 16)
// Q5_1: f16 d, f16 m, uint32 qh, qs[16]                    w = d * q + m
// Q4_K: f16 d, f16 dmin, uint8 scales[12] (8 x (6-bit scale, 6-bit min)), qs[128]:
//       element i: chunk c = i / 64, nibble (i % 64 >= 32) of qs[c * 32 + i % 32];
//       sub-block j = i / 32: w = (d * sc_j) * q - (dmin * m_j)
// Q5_K: as Q4_K plus qh[32] before qs: 5th bit of element i is bit (i / 32) of qh[i % 32]
// Q6_K: ql[128], qh[64], int8 scales[16], f16 d. Element i: half h = i / 128, r = i % 128,
//       g = r / 32, l = r % 32: low 4 bits = nibble (g >= 2) of ql[h * 64 + (g & 1) * 32 + l],
//       high 2 bits = bits 2g..2g+1 of qh[h * 32 + l]; w = (d * scales[i / 16]) * (q - 32)
// The 6-bit K scales: bytes b[0..11]; for j < 4: sc_j = b[j] & 63, m_j = b[j + 4] & 63;
// sc_{j+4} = (b[j + 8] & 15) | ((b[j] >> 6) << 4), m_{j+4} = (b[j + 8] >> 4) | ((b[j + 4] >> 6) <<
// 4).
void k_scale_min(const uint8_t* scales12, int j, uint8_t* sc, uint8_t* m);
// Q2_K: uint8 scales[16] (low nibble scale, high nibble min), qs[64], f16 d, f16 dmin. Element i:
//       sub-block s = i / 16, q = bits 2((s % 8) / 2).. of qs[32 (s / 8) + 16 (s % 2) + i % 16];
//       w = (d * (scales[s] & 15)) * q - (dmin * (scales[s] >> 4))
// Q3_K: hmask[32], qs[64], scales[12] (16 x 6 bits), f16 d. Element i: low 2 bits as Q2_K's,
//       high bit = bit s / 2 of hmask[16 (s % 2) + i % 16]; q = low - (high ? 0 : 4);
//       w = (d * (sc_s - 32)) * q with sc_s = q3_k_scale(scales, s)
// The 6-bit Q3_K scale s (0..15): low 4 bits = nibble (s >= 8) of b[s % 8], high 2 bits = bits
// 2 (s / 4).. of b[8 + s % 4].
int q3_k_scale(const uint8_t* scales12, int s);

}  // namespace steermoe::quant
