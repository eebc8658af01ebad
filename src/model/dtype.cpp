#include "model/dtype.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "common/error.hpp"
#include "quant/quant.hpp"

namespace steermoe::model {
namespace {

struct DTypeInfo {
  DType dtype;
  std::string_view name;
  uint64_t block_elements;
  uint64_t block_bytes;
};

constexpr std::array<DTypeInfo, 25> kDTypes = {{
    {DType::kF32, "F32", 1, 4},        {DType::kF16, "F16", 1, 2},
    {DType::kBF16, "BF16", 1, 2},      {DType::kF64, "F64", 1, 8},
    {DType::kI8, "I8", 1, 1},          {DType::kI16, "I16", 1, 2},
    {DType::kI32, "I32", 1, 4},        {DType::kI64, "I64", 1, 8},
    {DType::kU8, "U8", 1, 1},          {DType::kU16, "U16", 1, 2},
    {DType::kU32, "U32", 1, 4},        {DType::kU64, "U64", 1, 8},
    {DType::kBool, "BOOL", 1, 1},      {DType::kF8E4M3, "F8_E4M3", 1, 1},
    {DType::kF8E5M2, "F8_E5M2", 1, 1}, {DType::kQ8_0, "Q8_0", 32, 34},
    {DType::kQ4_0, "Q4_0", 32, 18},    {DType::kQ4_1, "Q4_1", 32, 20},
    {DType::kQ5_0, "Q5_0", 32, 22},    {DType::kQ5_1, "Q5_1", 32, 24},
    {DType::kQ4_K, "Q4_K", 256, 144},  {DType::kQ5_K, "Q5_K", 256, 176},
    {DType::kQ6_K, "Q6_K", 256, 210},  {DType::kQ2_K, "Q2_K", 256, 84},
    {DType::kQ3_K, "Q3_K", 256, 110},
}};

quant::Type quant_type_of(DType dtype) {
  return static_cast<quant::Type>(static_cast<int>(dtype) - static_cast<int>(DType::kQ8_0));
}

const DTypeInfo& info_of(DType dtype) {
  const auto index = static_cast<size_t>(dtype);
  SM_ASSERT(index < kDTypes.size() && kDTypes[index].dtype == dtype);
  return kDTypes[index];
}

uint16_t load_u16(const std::byte* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

}  // namespace

std::string_view dtype_name(DType dtype) {
  return info_of(dtype).name;
}

std::optional<DType> dtype_from_safetensors_name(std::string_view name) {
  for (const auto& info : kDTypes) {
    if (info.name == name && !dtype_is_quantized(info.dtype)) return info.dtype;
  }
  return std::nullopt;
}

uint64_t dtype_block_elements(DType dtype) {
  return info_of(dtype).block_elements;
}
uint64_t dtype_block_bytes(DType dtype) {
  return info_of(dtype).block_bytes;
}

uint64_t dtype_size(DType dtype) {
  const auto& info = info_of(dtype);
  SM_ASSERT_MSG(info.block_elements == 1, "dtype_size of a block-quantized type");
  return info.block_bytes;
}

std::optional<uint64_t> dtype_byte_size(DType dtype, uint64_t elements) {
  const auto& info = info_of(dtype);
  if (elements % info.block_elements != 0) return std::nullopt;
  const uint64_t blocks = elements / info.block_elements;
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(blocks, info.block_bytes, &bytes)) return std::nullopt;
  return bytes;
}

bool dtype_is_quantized(DType dtype) {
  return static_cast<int>(dtype) >= static_cast<int>(DType::kQ8_0);
}

bool dtype_converts_to_f32(DType dtype) {
  switch (dtype) {
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16:
    case DType::kF64:
    case DType::kF8E4M3:
      return true;
    default:
      return dtype_is_quantized(dtype);
  }
}

float bf16_to_f32(uint16_t bits) {
  return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
}

uint16_t f32_to_bf16(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) {
    // NaN: keep sign and the top payload bits, force the quiet bit so it cannot become inf.
    return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  }
  // Round to nearest, ties to even: add 0x7fff plus the lowest kept bit, then truncate. A carry
  // out of the mantissa correctly bumps the exponent (up to inf for the largest floats).
  const uint32_t rounding_bias = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding_bias) >> 16);
}

// IEEE half <-> f32: one implementation for the project (quant/, round to nearest even).
float f16_to_f32(uint16_t bits) {
  return quant::f16_to_f32(bits);
}
uint16_t f32_to_f16(float value) {
  return quant::f32_to_f16(value);
}

void convert_to_f32(DType dtype, std::span<const std::byte> src, std::span<float> dst,
                    std::string_view what) {
  const auto expected = dtype_byte_size(dtype, dst.size());
  if (!expected || *expected != src.size()) {
    fail(std::string(what), "convert to f32", "{} elements of {} need {} bytes, got {}", dst.size(),
         dtype_name(dtype), expected ? fmt::to_string(*expected) : "(invalid)", src.size());
  }
  const std::byte* p = src.data();
  switch (dtype) {
    case DType::kF32:
      if (!dst.empty()) std::memcpy(dst.data(), p, src.size());
      return;
    case DType::kF16:
      for (size_t i = 0; i < dst.size(); ++i) dst[i] = f16_to_f32(load_u16(p + 2 * i));
      return;
    case DType::kBF16:
      for (size_t i = 0; i < dst.size(); ++i) dst[i] = bf16_to_f32(load_u16(p + 2 * i));
      return;
    case DType::kF64:
      for (size_t i = 0; i < dst.size(); ++i) {
        double v;
        std::memcpy(&v, p + 8 * i, sizeof v);
        dst[i] = static_cast<float>(v);
      }
      return;
    case DType::kF8E4M3:
      quant::dequantize_row(quant::Type::kF8E4M3, p, dst.data(), dst.size());
      return;
    default:
      if (dtype_is_quantized(dtype)) {
        quant::dequantize_row(quant_type_of(dtype), p, dst.data(), dst.size());
        return;
      }
      fail(std::string(what), "dtype",
           "expected F32, F16, BF16, F64, F8_E4M3 or a GGUF block type to convert to f32, found {}",
           dtype_name(dtype));
  }
}

void convert_from_f32(DType dtype, std::span<const float> src, std::span<std::byte> dst,
                      std::string_view what) {
  const auto expected = dtype_byte_size(dtype, src.size());
  if (!expected || *expected != dst.size()) {
    fail(std::string(what), "convert from f32", "{} elements of {} need {} bytes, got {}",
         src.size(), dtype_name(dtype), expected ? fmt::to_string(*expected) : "(invalid)",
         dst.size());
  }
  std::byte* p = dst.data();
  switch (dtype) {
    case DType::kF32:
      if (!src.empty()) std::memcpy(p, src.data(), dst.size());
      return;
    case DType::kF16:
      for (size_t i = 0; i < src.size(); ++i) {
        const uint16_t h = f32_to_f16(src[i]);
        std::memcpy(p + 2 * i, &h, 2);
      }
      return;
    case DType::kBF16:
      for (size_t i = 0; i < src.size(); ++i) {
        const uint16_t h = f32_to_bf16(src[i]);
        std::memcpy(p + 2 * i, &h, 2);
      }
      return;
    default:
      if (dtype_is_quantized(dtype)) {  // Q8_0: ggml's rounding; others: quant/quantize.cpp
        quant::quantize_row(quant_type_of(dtype), src.data(), p, src.size());
        return;
      }
      fail(std::string(what), "dtype",
           "expected F32, F16, BF16 or a GGUF block type to convert from f32, found {}",
           dtype_name(dtype));
  }
}

uint64_t TensorView::elements() const {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;  // readers already checked the product for overflow
  return n;
}

std::string TensorView::shape_string() const {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

std::vector<float> TensorView::to_f32() const {
  std::vector<float> out(elements());
  to_f32(out);
  return out;
}

void TensorView::to_f32(std::span<float> dst) const {
  convert_to_f32(dtype, bytes(), dst, fmt::format("tensor '{}'", name));
}

}  // namespace steermoe::model
