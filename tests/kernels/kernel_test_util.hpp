// Helpers shared by the kernel tests: random data, weight matrices in each dtype, the Isas to
// compare, and tolerances derived from the inputs.
#pragma once

#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kernels/kernels.hpp"

namespace steermoe::kernels::testing {

inline constexpr Isa kSimdIsas[] = {Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Bf16};

inline std::string isa_param_name(const ::testing::TestParamInfo<Isa>& info) {
  return std::string(isa_name(info.param));
}

// Skips the current test when the CPU lacks `isa` (the only reason a SIMD test may skip).
#define SM_REQUIRE_ISA(isa)                                                               \
  do {                                                                                    \
    if (!::steermoe::kernels::isa_available(isa)) {                                       \
      GTEST_SKIP() << "CPU lacks the features of " << ::steermoe::kernels::isa_name(isa); \
    }                                                                                     \
  } while (0)

inline std::vector<float> random_floats(std::mt19937& rng, size_t n, float lo = -1.0f,
                                        float hi = 1.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// A weight matrix stored in `dtype` with padding elements before the data (misalignment) and a
// row stride of at least cols; values() gives the dequantised floats.
class TestMatrix {
 public:
  TestMatrix(std::mt19937& rng, DType dtype, size_t rows, size_t cols, size_t offset,
             size_t row_pad = 0)
      : dtype_(dtype), rows_(rows), cols_(cols), stride_(cols + row_pad), offset_(offset) {
    const size_t n = rows * stride_ + offset;
    values_ = random_floats(rng, n);
    if (dtype == DType::kF32) {
      f32_ = values_;
    } else {
      bits_.resize(n);
      for (size_t i = 0; i < n; ++i) {
        bits_[i] = dtype == DType::kBF16 ? f32_to_bf16(values_[i]) : f32_to_f16(values_[i]);
        values_[i] = dtype == DType::kBF16 ? bf16_to_f32(bits_[i]) : f16_to_f32(bits_[i]);
      }
    }
  }

  Matrix view() const {
    const void* data = dtype_ == DType::kF32 ? static_cast<const void*>(f32_.data() + offset_)
                                             : static_cast<const void*>(bits_.data() + offset_);
    return Matrix{
        .data = data, .dtype = dtype_, .rows = rows_, .cols = cols_, .row_stride = stride_};
  }
  float at(size_t r, size_t c) const { return values_[offset_ + r * stride_ + c]; }

  // sum_c |W[r][c] x[c]|: the scale of the rounding error of row r's dot product.
  double abs_dot(size_t r, const float* x) const {
    double s = 0.0;
    for (size_t c = 0; c < cols_; ++c) s += std::fabs(static_cast<double>(at(r, c)) * x[c]);
    return s;
  }

 private:
  DType dtype_;
  size_t rows_, cols_, stride_, offset_;
  std::vector<float> values_;
  std::vector<float> f32_;
  std::vector<uint16_t> bits_;
};

// Error bound for two n-term dot products computed in different orders: each is within
// gamma_n * sum|a_i b_i| of the exact value (gamma_n ~ n * eps); the blocked SIMD order has a much
// smaller constant, so (n + 32) * eps bounds the difference with margin. Paths that round x to
// bf16 add 2^-9 relative per product (2^-8 for margin).
inline double dot_tolerance(size_t n, double abs_sum, bool x_rounded_to_bf16) {
  double rel = static_cast<double>(n + 32) * FLT_EPSILON;
  if (x_rounded_to_bf16) rel += 1.0 / 256.0;
  return rel * abs_sum + 1e-30;
}

inline bool rounds_x_to_bf16(Isa isa, DType dtype) {
  return isa == Isa::kAvx512Bf16 && dtype == DType::kBF16;
}

inline AttentionParams detail_params(size_t n_heads, size_t n_kv_heads, size_t dk, size_t dv) {
  return AttentionParams{.n_heads = n_heads,
                         .n_kv_heads = n_kv_heads,
                         .head_dim_k = dk,
                         .head_dim_v = dv,
                         .scale = 1.0f / std::sqrt(static_cast<float>(dk))};
}

// The documented defaults of the 0 strides, spelled out for the tests' own index arithmetic.
inline AttentionParams resolved(AttentionParams p) {
  if (p.q_head_stride == 0) p.q_head_stride = p.head_dim_k;
  if (p.out_head_stride == 0) p.out_head_stride = p.head_dim_v;
  if (p.k_pos_stride == 0) p.k_pos_stride = p.n_kv_heads * p.head_dim_k;
  if (p.v_pos_stride == 0) p.v_pos_stride = p.n_kv_heads * p.head_dim_v;
  return p;
}

}  // namespace steermoe::kernels::testing
