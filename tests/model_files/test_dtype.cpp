#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <random>

#include "model/dtype.hpp"
#include "test_util.hpp"

namespace steermoe::model {
namespace {

using testing::Bytes;

float from_bits(uint32_t bits) {
  return std::bit_cast<float>(bits);
}

TEST(DType, SizesAndNames) {
  EXPECT_EQ(dtype_size(DType::kF32), 4u);
  EXPECT_EQ(dtype_size(DType::kBF16), 2u);
  EXPECT_EQ(dtype_size(DType::kI64), 8u);
  EXPECT_EQ(dtype_block_elements(DType::kQ8_0), 32u);
  EXPECT_EQ(dtype_block_bytes(DType::kQ8_0), 34u);
  EXPECT_EQ(dtype_byte_size(DType::kF16, 10), 20u);
  EXPECT_EQ(dtype_byte_size(DType::kQ8_0, 64), 68u);
  EXPECT_EQ(dtype_byte_size(DType::kQ8_0, 33), std::nullopt);                // not whole blocks
  EXPECT_EQ(dtype_byte_size(DType::kF64, uint64_t{1} << 62), std::nullopt);  // overflow
  EXPECT_EQ(dtype_name(DType::kF8E4M3), "F8_E4M3");
  EXPECT_EQ(dtype_from_safetensors_name("BF16"), DType::kBF16);
  EXPECT_EQ(dtype_from_safetensors_name("BOOL"), DType::kBool);
  EXPECT_EQ(dtype_from_safetensors_name("Q8_0"), std::nullopt);
  EXPECT_EQ(dtype_from_safetensors_name("f32"), std::nullopt);
}

TEST(DType, Bf16RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(f32_to_bf16(from_bits(0x3f808000)), 0x3f80);  // tie, keep even
  EXPECT_EQ(f32_to_bf16(from_bits(0x3f818000)), 0x3f82);  // tie, round up to even
  EXPECT_EQ(f32_to_bf16(from_bits(0x3f808001)), 0x3f81);  // above the tie
  EXPECT_EQ(f32_to_bf16(from_bits(0x3f807fff)), 0x3f80);  // below the tie
  EXPECT_EQ(f32_to_bf16(from_bits(0xbf818000)), 0xbf82);  // sign is symmetric
  EXPECT_EQ(f32_to_bf16(from_bits(0x7f7fffff)), 0x7f80);  // largest float rounds to inf
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::infinity()), 0x7f80);
  const uint16_t nan = f32_to_bf16(from_bits(0x7f800001));  // signalling NaN with a low payload
  EXPECT_TRUE(std::isnan(bf16_to_f32(nan)));
  EXPECT_EQ(bf16_to_f32(0x3f80), 1.0f);
  EXPECT_EQ(bf16_to_f32(0xc049), from_bits(0xc0490000));
}

TEST(DType, Bf16MatchesDoubleRounding) {
  // For random finite floats, the result must be one of the two neighbours and the nearer one.
  std::mt19937 rng(7);
  for (int i = 0; i < 200000; ++i) {
    const uint32_t bits = rng() & 0x7fffffffu;
    if (bits >= 0x7f7f0000u) continue;  // keep both neighbours finite
    const float x = from_bits(bits);
    const uint16_t r = f32_to_bf16(x);
    const double lo = bf16_to_f32(static_cast<uint16_t>(bits >> 16));
    const double hi = bf16_to_f32(static_cast<uint16_t>((bits >> 16) + 1));
    const double dlo = static_cast<double>(x) - lo;
    const double dhi = hi - static_cast<double>(x);
    const uint16_t expected = dlo < dhi   ? static_cast<uint16_t>(bits >> 16)
                              : dhi < dlo ? static_cast<uint16_t>((bits >> 16) + 1)
                                          : static_cast<uint16_t>(((bits >> 16) + 1) & ~1u);
    ASSERT_EQ(r, expected) << "bits " << std::hex << bits;
  }
}

TEST(DType, F16ExhaustiveRoundTrip) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = f16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(f)))) << h;
      continue;
    }
    ASSERT_EQ(f32_to_f16(f), h) << "f16 bits " << h;
  }
  EXPECT_EQ(f16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_f32(0x7bff), 65504.0f);
  EXPECT_EQ(f16_to_f32(0x0001), 0x1p-24f);
  EXPECT_EQ(f16_to_f32(0x8000), -0.0f);
  EXPECT_TRUE(std::signbit(f16_to_f32(0x8000)));
}

TEST(DType, F16RoundsToNearestEvenAtEveryMidpoint) {
  // The midpoint between consecutive positive finite f16 values rounds to the even one; a hair
  // above / below rounds away from / towards it.
  for (uint32_t h = 0; h < 0x7bff; ++h) {
    const double lo = f16_to_f32(static_cast<uint16_t>(h));
    const double hi = f16_to_f32(static_cast<uint16_t>(h + 1));
    const auto mid = static_cast<float>((lo + hi) / 2);  // exact in f32
    ASSERT_EQ(static_cast<double>(mid), (lo + hi) / 2);
    const uint16_t even = (h & 1) ? static_cast<uint16_t>(h + 1) : static_cast<uint16_t>(h);
    ASSERT_EQ(f32_to_f16(mid), even) << h;
    ASSERT_EQ(f32_to_f16(std::nextafter(mid, 1e9f)), h + 1) << h;
    ASSERT_EQ(f32_to_f16(std::nextafter(mid, 0.0f)), h) << h;
  }
  EXPECT_EQ(f32_to_f16(65519.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);  // the tie above the largest f16 goes to inf
  EXPECT_EQ(f32_to_f16(1e10f), 0x7c00);
  EXPECT_EQ(f32_to_f16(-1e10f), 0xfc00);
  EXPECT_EQ(f32_to_f16(0x1p-25f), 0x0000);  // tie between 0 and the smallest subnormal
  EXPECT_EQ(f32_to_f16(0x1.8p-25f), 0x0001);
  EXPECT_EQ(f32_to_f16(1e-30f), 0x0000);
  EXPECT_EQ(f32_to_f16(-1e-30f), 0x8000);
  EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(DType, ConvertToAndFromF32) {
  const std::vector<float> values = {0.0f, 1.0f, -2.5f, 3.140625f, 1024.0f, -0.0078125f};
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    std::vector<std::byte> encoded(*dtype_byte_size(dtype, values.size()));
    convert_from_f32(dtype, values, encoded);
    std::vector<float> decoded(values.size());
    convert_to_f32(dtype, encoded, decoded);
    EXPECT_EQ(decoded, values) << dtype_name(dtype);  // all values exact in every format
  }
  // F64 reads.
  Bytes f64;
  f64.put(1.5).put(-3.0);
  std::vector<float> out(2);
  convert_to_f32(DType::kF64, f64.data(), out);
  EXPECT_EQ(out, (std::vector<float>{1.5f, -3.0f}));
  // Size mismatch and unsupported types are Errors naming the tensor.
  std::vector<std::byte> short_buffer(3);
  EXPECT_ERROR_WITH(convert_to_f32(DType::kF32, short_buffer, out, "tensor 'w'"), "tensor 'w'",
                    "need 8 bytes");
  std::vector<std::byte> ints(8);
  EXPECT_ERROR_WITH(convert_to_f32(DType::kI32, ints, out, "tensor 'w'"), "found I32");
  std::vector<std::byte> q(8);
  EXPECT_ERROR_WITH(convert_from_f32(DType::kI32, out, q), "found I32");
}

TEST(DType, Q8_0QuantizeDequantize) {
  std::vector<float> values(64);
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (auto& v : values) v = normal(rng);
  values[5] = 0.0f;
  std::vector<std::byte> q(68);
  convert_from_f32(DType::kQ8_0, values, q);
  std::vector<float> back(64);
  convert_to_f32(DType::kQ8_0, q, back);
  for (size_t block = 0; block < 2; ++block) {
    float amax = 0.0f;
    for (size_t j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(values[block * 32 + j]));
    const float scale = f16_to_f32(f32_to_f16(amax / 127.0f));
    for (size_t j = 0; j < 32; ++j) {
      // Error <= half a step, plus the f16 rounding of the scale (relative 2^-11) times 127.
      EXPECT_NEAR(back[block * 32 + j], values[block * 32 + j], scale * 0.5f + amax * 1e-3f);
    }
  }
  EXPECT_EQ(back[5], 0.0f);
  // A known block: scale 1.0 (f16 0x3c00), quants 0..31.
  Bytes block;
  block.put<uint16_t>(0x3c00);
  for (int j = 0; j < 32; ++j) block.put<int8_t>(static_cast<int8_t>(j - 16));
  std::vector<float> decoded(32);
  convert_to_f32(DType::kQ8_0, block.data(), decoded);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(decoded[j], static_cast<float>(j - 16));
  // NaN input does not crash (quantized to 0 in that lane).
  values[0] = std::numeric_limits<float>::quiet_NaN();
  convert_from_f32(DType::kQ8_0, values, q);
}

TEST(DType, TensorViewHelpers) {
  const std::vector<uint16_t> halves = {0x3c00, 0x4000, 0xc000, 0x3800, 0, 0x7bff};
  TensorView view{"t", DType::kF16, {2, 3}, reinterpret_cast<const std::byte*>(halves.data()), 12};
  EXPECT_EQ(view.elements(), 6u);
  EXPECT_EQ(view.shape_string(), "[2, 3]");
  EXPECT_EQ(view.to_f32(), (std::vector<float>{1.0f, 2.0f, -2.0f, 0.5f, 0.0f, 65504.0f}));
  TensorView scalar{"s", DType::kF32, {}, nullptr, 4};
  EXPECT_EQ(scalar.elements(), 1u);
  EXPECT_EQ(scalar.shape_string(), "[]");
}

}  // namespace
}  // namespace steermoe::model
