// Each SIMD implementation against the scalar reference over sizes, misalignments and random
// inputs, with tolerances derived from the inputs; and the scalar reference against direct
// formulas.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <numeric>

#include "common/error.hpp"
#include "kernel_test_util.hpp"

namespace steermoe::kernels::testing {
namespace {

// Sizes around every SIMD block boundary (8, 16, 32) and a few larger odd ones.
const std::vector<size_t> kSizes = {1,  2,  3,  7,  8,  9,   15,  16,  17,  31,  32,  33,
                                    47, 63, 64, 65, 96, 100, 127, 128, 129, 192, 255, 300};

TEST(Conversions, F16RoundTripsEveryValue) {
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    const auto h = static_cast<uint16_t>(bits);
    const float f = f16_to_f32(h);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(f))));
      continue;
    }
    ASSERT_EQ(f32_to_f16(f), h) << "f16 bits " << bits;
  }
}

TEST(Conversions, F16KnownValuesAndRounding) {
  EXPECT_EQ(f16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_f32(0x7bff), 65504.0f);
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(f16_to_f32(0xc000), -2.0f);
  EXPECT_EQ(f32_to_f16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);      // tie -> even
  EXPECT_EQ(f32_to_f16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);  // tie -> even (up)
  EXPECT_EQ(f32_to_f16(70000.0f), 0x7c00);                          // overflow -> inf
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -25)), 0x0000);             // tie -> even (zero)
  EXPECT_EQ(f32_to_f16(std::ldexp(3.0f, -26)), 0x0001);
}

TEST(Conversions, Bf16RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(bf16_to_f32(0x3f80), 1.0f);
  EXPECT_EQ(f32_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);      // tie -> even
  EXPECT_EQ(f32_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);  // tie -> even (up)
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::nanf("")))));
}

TEST(Dispatch, BestIsaIsAvailableAndTablesMatchTheirIsa) {
  EXPECT_TRUE(isa_available(best_isa()));
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Bf16}) {
    if (isa_available(isa)) {
      EXPECT_EQ(kernel_table(isa).isa, isa);
    }
  }
  EXPECT_EQ(active_kernels().isa, active_isa());
}

TEST(Dispatch, KernelsEnvironmentVariableSelectsTheLevelOrNamesItself) {
  const Isa before = active_isa();
  ::setenv("STEERMOE_KERNELS", "scalar", 1);
  select_isa_from_env();
  EXPECT_EQ(active_isa(), Isa::kScalar);
  ::setenv("STEERMOE_KERNELS", "avx3", 1);
  try {
    select_isa_from_env();
    ADD_FAILURE() << "an unknown level was accepted";
  } catch (const steermoe::Error& e) {
    EXPECT_NE(std::string(e.what()).find("STEERMOE_KERNELS: value: expected scalar"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(active_isa(), Isa::kScalar);  // unchanged by the bad value
  ::setenv("STEERMOE_KERNELS", "", 1);
  set_active_isa(before);
  select_isa_from_env();  // empty: no change
  EXPECT_EQ(active_isa(), before);
  ::unsetenv("STEERMOE_KERNELS");
}

TEST(ScalarReference, MatvecMatchesDoublePrecision) {
  std::mt19937 rng(1);
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    TestMatrix w(rng, dtype, 5, 129, 0);
    const auto x = random_floats(rng, 129);
    std::vector<float> y(5);
    kernel_table(Isa::kScalar).matvec_rows(w.view(), x.data(), y.data(), 0, 5, {});
    for (size_t r = 0; r < 5; ++r) {
      double exact = 0.0;
      for (size_t c = 0; c < 129; ++c) exact += static_cast<double>(w.at(r, c)) * x[c];
      EXPECT_NEAR(y[r], exact, dot_tolerance(129, w.abs_dot(r, x.data()), false));
    }
  }
}

// RoPE against the formula: pairs (i, i + d/2) for NeoX, (2i, 2i + 1) interleaved, rotated by
// pos * theta^(-2i/d) (angle in fp32 as transformers computes it), and nothing outside
// [rot_offset, rot_offset + rot_dim) touched.
TEST(ScalarReference, RopeMatchesTheFormulaAndLeavesOtherElements) {
  std::mt19937 rng(12);
  const size_t head_dim = 24, rot_offset = 4, rot = 16, n_heads = 2;
  for (RopeStyle style : {RopeStyle::kNeox, RopeStyle::kInterleaved}) {
    for (size_t pos : {0, 3, 1000}) {
      const auto x = random_floats(rng, n_heads * head_dim);
      std::vector<float> y = x;
      kernel_table(Isa::kScalar)
          .rope(y.data(), n_heads, pos,
                {.style = style,
                 .head_dim = head_dim,
                 .rot_offset = rot_offset,
                 .rot_dim = rot,
                 .theta = 10000.0f});
      for (size_t h = 0; h < n_heads; ++h) {
        const float* in = x.data() + h * head_dim;
        const float* out = y.data() + h * head_dim;
        for (size_t d = 0; d < head_dim; ++d) {
          if (d < rot_offset || d >= rot_offset + rot) {
            EXPECT_EQ(out[d], in[d]) << d;
          }
        }
        for (size_t i = 0; i < rot / 2; ++i) {
          const size_t a = rot_offset + (style == RopeStyle::kNeox ? i : 2 * i);
          const size_t b = rot_offset + (style == RopeStyle::kNeox ? i + rot / 2 : 2 * i + 1);
          const float inv_freq =
              1.0f / std::pow(10000.0f, static_cast<float>(2 * i) / static_cast<float>(rot));
          const double angle = static_cast<float>(pos) * inv_freq;
          const double c = std::cos(angle), sn = std::sin(angle);
          const double tol = 4 * FLT_EPSILON * (std::fabs(in[a]) + std::fabs(in[b])) + 1e-30;
          EXPECT_NEAR(out[a], in[a] * c - in[b] * sn, tol) << "pos " << pos << " i " << i;
          EXPECT_NEAR(out[b], in[a] * sn + in[b] * c, tol) << "pos " << pos << " i " << i;
        }
      }
    }
  }
}

TEST(ScalarReference, RmsNormSwiGluSoftmaxMatchTheirFormulas) {
  std::mt19937 rng(13);
  const KernelTable& ref = kernel_table(Isa::kScalar);
  const size_t n = 37;
  const auto x = random_floats(rng, n, -4.0f, 4.0f);
  const auto w = random_floats(rng, n);
  std::vector<float> y(n);
  ref.rmsnorm(x.data(), w.data(), y.data(), n, {.eps = 1e-5f, .weight_offset = 1.0f});
  double mean_sq = 0.0;
  for (float v : x) mean_sq += static_cast<double>(v) * v / n;
  for (size_t i = 0; i < n; ++i) {
    const double expected = x[i] / std::sqrt(mean_sq + 1e-5) * (1.0 + w[i]);
    EXPECT_NEAR(y[i], expected, 64 * FLT_EPSILON * std::fabs(expected)) << i;
  }
  ref.swiglu(x.data(), w.data(), y.data(), n);
  for (size_t i = 0; i < n; ++i) {
    const double expected = x[i] / (1.0 + std::exp(-static_cast<double>(x[i]))) * w[i];
    EXPECT_NEAR(y[i], expected, 8 * FLT_EPSILON * std::fabs(expected) + 1e-30) << i;
  }
  y = x;
  ref.softmax(y.data(), n);
  double total = 0.0;
  for (float v : x) total += std::exp(static_cast<double>(v));
  for (size_t i = 0; i < n; ++i) {
    const double expected = std::exp(static_cast<double>(x[i])) / total;
    EXPECT_NEAR(y[i], expected, 64 * FLT_EPSILON * expected) << i;
  }
}

class SimdVsScalar : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override { SM_REQUIRE_ISA(GetParam()); }
  const KernelTable& simd() const { return kernel_table(GetParam()); }
  const KernelTable& ref() const { return kernel_table(Isa::kScalar); }
};

TEST_P(SimdVsScalar, MatvecAllDtypesSizesAndOffsets) {
  std::mt19937 rng(2);
  const std::vector<size_t> row_counts = {1, 3, 4, 5, 9, 17, 33};
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    const bool x_bf16 = rounds_x_to_bf16(GetParam(), dtype);
    for (size_t cols : kSizes) {
      const size_t rows = row_counts[cols % row_counts.size()];
      const size_t offset = cols % 4;  // 0..3 elements: misaligned weights and x
      TestMatrix w(rng, dtype, rows, cols, offset, cols % 3);
      const auto x_buf = random_floats(rng, cols + offset);
      const float* x = x_buf.data() + offset;
      const MatvecParams params{.scale = cols % 2 == 0 ? 1.0f : 0.37f, .accumulate = cols % 5 == 0};
      const auto init = random_floats(rng, rows + offset);
      std::vector<float> y_ref(init.begin() + static_cast<long>(offset), init.end());
      std::vector<float> y_simd_buf = init;
      float* y_simd = y_simd_buf.data() + offset;
      ref().matvec_rows(w.view(), x, y_ref.data(), 0, rows, params);
      simd().matvec_rows(w.view(), x, y_simd, 0, rows, params);
      for (size_t r = 0; r < rows; ++r) {
        const double tol = std::fabs(params.scale) * dot_tolerance(cols, w.abs_dot(r, x), x_bf16);
        ASSERT_NEAR(y_simd[r], y_ref[r], tol)
            << dtype_name(dtype) << " rows " << rows << " cols " << cols << " row " << r;
      }
    }
  }
}

TEST_P(SimdVsScalar, MatvecRowRangeWritesOnlyItsRows) {
  std::mt19937 rng(3);
  TestMatrix w(rng, DType::kBF16, 40, 70, 1);
  const auto x = random_floats(rng, 70);
  std::vector<float> full(40), part(40, -7.0f);
  simd().matvec_rows(w.view(), x.data(), full.data(), 0, 40, {});
  simd().matvec_rows(w.view(), x.data(), part.data() + 13, 13, 29, {});
  for (size_t r = 0; r < 40; ++r) {
    if (r >= 13 && r < 29) {
      EXPECT_EQ(part[r], full[r]) << r;
    } else {
      EXPECT_EQ(part[r], -7.0f) << r;
    }
  }
}

// Prefill products equal the decode products of each row bit for bit, and match the reference.
TEST_P(SimdVsScalar, MatmulRowsEqualMatvecAndReference) {
  std::mt19937 rng(4);
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (size_t n : {1, 2, 3, 4, 5, 7, 9, 37}) {
      const size_t rows = 3 + n % 5 * 4;  // includes rows that are not a multiple of the tile
      const size_t cols = 17 + 29 * n % 90;
      TestMatrix w(rng, dtype, rows, cols, n % 4);
      const size_t x_stride = cols + n % 3;
      const size_t y_stride = rows + 2;
      const auto x = random_floats(rng, n * x_stride);
      std::vector<float> y(n * y_stride, 0.0f), y_ref(n * y_stride, 0.0f);
      const MatvecParams params{.scale = 0.5f};
      simd().matmul_rows(w.view(), x.data(), x_stride, n, y.data(), y_stride, 0, rows, params);
      ref().matmul_rows(w.view(), x.data(), x_stride, n, y_ref.data(), y_stride, 0, rows, params);
      std::vector<float> single(rows);
      for (size_t i = 0; i < n; ++i) {
        simd().matvec_rows(w.view(), x.data() + i * x_stride, single.data(), 0, rows, params);
        for (size_t r = 0; r < rows; ++r) {
          ASSERT_EQ(y[i * y_stride + r], single[r]) << "token " << i << " row " << r;
          const double tol = 0.5 * dot_tolerance(cols, w.abs_dot(r, x.data() + i * x_stride),
                                                 rounds_x_to_bf16(GetParam(), dtype));
          ASSERT_NEAR(y[i * y_stride + r], y_ref[i * y_stride + r], tol);
        }
      }
    }
  }
}

// Rows of 2048+ columns take the decode tiles that prefetch the next tile (avx512bf16): the same
// values as the prefill tiles, whatever the row range, and the reference within tolerance.
TEST_P(SimdVsScalar, LongRowsMatvecEqualsMatmulAndReference) {
  std::mt19937 rng(41);
  for (size_t cols : {2048, 2085}) {
    const size_t rows = 23;  // 5 tiles of 4 plus 3 single rows
    TestMatrix w(rng, DType::kBF16, rows, cols, 1, cols % 3);
    const size_t n = 4;
    const auto x = random_floats(rng, n * cols);
    std::vector<float> y(n * rows, 0.0f), y_ref(n * rows, 0.0f);
    simd().matmul_rows(w.view(), x.data(), cols, n, y.data(), rows, 0, rows, {});
    ref().matmul_rows(w.view(), x.data(), cols, n, y_ref.data(), rows, 0, rows, {});
    for (size_t i = 0; i < n; ++i) {
      for (const auto& [begin, end] : {std::pair<size_t, size_t>{0, rows}, {4, 17}, {9, rows}}) {
        std::vector<float> single(rows, -7.0f);
        simd().matvec_rows(w.view(), x.data() + i * cols, single.data() + begin, begin, end, {});
        for (size_t r = begin; r < end; ++r) {
          ASSERT_EQ(y[i * rows + r], single[r])
              << "cols " << cols << " token " << i << " row " << r;
          const double tol = dot_tolerance(cols, w.abs_dot(r, x.data() + i * cols),
                                           rounds_x_to_bf16(GetParam(), DType::kBF16));
          ASSERT_NEAR(y[i * rows + r], y_ref[i * rows + r], tol);
        }
      }
    }
  }
}

TEST_P(SimdVsScalar, DotAxpyAddScale) {
  std::mt19937 rng(5);
  for (size_t n : kSizes) {
    const size_t off = n % 4;
    const auto a_buf = random_floats(rng, n + off);
    const auto b_buf = random_floats(rng, n + off);
    const float* a = a_buf.data() + off;
    const float* b = b_buf.data() + off;
    double abs_sum = 0.0;
    for (size_t i = 0; i < n; ++i) abs_sum += std::fabs(static_cast<double>(a[i]) * b[i]);
    ASSERT_NEAR(simd().dot(a, b, n), ref().dot(a, b, n), dot_tolerance(n, abs_sum, false)) << n;

    std::vector<float> y_simd(b, b + n), y_ref(b, b + n);
    simd().axpy(0.3f, a, y_simd.data(), n);
    ref().axpy(0.3f, a, y_ref.data(), n);
    for (size_t i = 0; i < n; ++i) {
      // FMA rounds once, the reference twice: at most one rounding of each term apart.
      const double tol = 2 * FLT_EPSILON * (std::fabs(0.3 * a[i]) + std::fabs(b[i]));
      ASSERT_NEAR(y_simd[i], y_ref[i], tol) << n << " " << i;
    }
    std::vector<float> sum_simd(n), sum_ref(n);
    simd().add(a, b, sum_simd.data(), n);
    ref().add(a, b, sum_ref.data(), n);
    EXPECT_EQ(sum_simd, sum_ref) << n;  // one correctly rounded add: exact match
    std::vector<float> s_simd(a, a + n), s_ref(a, a + n);
    simd().scale(-1.7f, s_simd.data(), n);
    ref().scale(-1.7f, s_ref.data(), n);
    EXPECT_EQ(s_simd, s_ref) << n;
  }
}

TEST_P(SimdVsScalar, RmsNorm) {
  std::mt19937 rng(6);
  for (size_t n : kSizes) {
    const size_t off = (n + 1) % 4;
    const auto x_buf = random_floats(rng, n + off, -3.0f, 3.0f);
    const auto w_buf = random_floats(rng, n + off);
    const float* x = x_buf.data() + off;
    for (const float* weight : {w_buf.data() + off, static_cast<const float*>(nullptr)}) {
      for (float offset : {0.0f, 1.0f}) {
        const RmsNormParams params{.eps = 1e-6f, .weight_offset = offset};
        std::vector<float> y_simd(n), y_ref(n);
        simd().rmsnorm(x, weight, y_simd.data(), n, params);
        ref().rmsnorm(x, weight, y_ref.data(), n, params);
        // The sums of squares differ by at most (n + 32) eps relative; the rsqrt halves that;
        // the two multiplies add a few ulps.
        for (size_t i = 0; i < n; ++i) {
          const double tol = (0.5 * static_cast<double>(n + 32) + 4) * FLT_EPSILON *
                             std::fabs(static_cast<double>(y_ref[i]));
          ASSERT_NEAR(y_simd[i], y_ref[i], tol + 1e-30) << n << " " << i;
        }
      }
    }
  }
}

TEST_P(SimdVsScalar, RmsNormInPlace) {
  std::mt19937 rng(7);
  auto x = random_floats(rng, 77);
  const auto w = random_floats(rng, 77);
  std::vector<float> expected(77);
  simd().rmsnorm(x.data(), w.data(), expected.data(), 77, {});
  simd().rmsnorm(x.data(), w.data(), x.data(), 77, {});
  EXPECT_EQ(x, expected);
}

TEST_P(SimdVsScalar, RopeIsBitIdenticalToReference) {
  std::mt19937 rng(8);
  struct Case {
    RopeStyle style;
    size_t head_dim, rot_offset, rot_dim;
  };
  const Case cases[] = {
      {RopeStyle::kNeox, 128, 0, 0},            // OLMoE / Qwen3
      {RopeStyle::kNeox, 256, 0, 64},           // Qwen3.5 partial rotary
      {RopeStyle::kInterleaved, 192, 128, 64},  // MLA q: rotate the suffix
      {RopeStyle::kInterleaved, 64, 0, 0},      // MLA shared k_rot
      {RopeStyle::kNeox, 40, 2, 34},            // odd block tails
      {RopeStyle::kInterleaved, 30, 1, 26},
  };
  for (const Case& c : cases) {
    for (size_t pos : {0, 1, 17, 4095}) {
      const size_t n_heads = 3;
      const auto x = random_floats(rng, n_heads * c.head_dim + 1);
      std::vector<float> a(x.begin() + 1, x.end()), b = a;
      const RopeParams params{.style = c.style,
                              .head_dim = c.head_dim,
                              .rot_offset = c.rot_offset,
                              .rot_dim = c.rot_dim,
                              .theta = 50000.0f};
      simd().rope(a.data(), n_heads, pos, params);
      ref().rope(b.data(), n_heads, pos, params);
      ASSERT_EQ(a, b) << "head_dim " << c.head_dim << " pos " << pos;
    }
  }
}

TEST_P(SimdVsScalar, SwiGlu) {
  std::mt19937 rng(9);
  for (size_t n : kSizes) {
    const size_t off = n % 3;
    auto g = random_floats(rng, n + off, -12.0f, 12.0f);
    const auto u = random_floats(rng, n + off, -2.0f, 2.0f);
    if (n > 4) {
      g[off] = -100.0f;  // exp overflows to inf: silu = -0
      g[off + 1] = 95.0f;
      g[off + 2] = 0.0f;
    }
    std::vector<float> y_simd(n), y_ref(n);
    simd().swiglu(g.data() + off, u.data() + off, y_simd.data(), n);
    ref().swiglu(g.data() + off, u.data() + off, y_ref.data(), n);
    for (size_t i = 0; i < n; ++i) {
      // exp within a few ulp; 1+e, the division and the product add one rounding each.
      const double tol = 8 * FLT_EPSILON * std::fabs(static_cast<double>(y_ref[i])) + 1e-30;
      ASSERT_NEAR(y_simd[i], y_ref[i], tol) << n << " " << i << " g " << g[off + i];
    }
  }
}

TEST_P(SimdVsScalar, Softmax) {
  std::mt19937 rng(10);
  for (size_t n : kSizes) {
    for (float spread : {1.0f, 30.0f, 200.0f}) {
      const auto x = random_floats(rng, n + 1, -spread, spread);
      std::vector<float> a(x.begin() + 1, x.end()), b = a;
      simd().softmax(a.data(), n);
      ref().softmax(b.data(), n);
      double total = 0.0;
      for (size_t i = 0; i < n; ++i) {
        // Each exp a few ulp; the sum (n + 32) eps; one division.
        const double tol = (static_cast<double>(n + 32) + 8) * FLT_EPSILON * b[i] + 1e-37;
        ASSERT_NEAR(a[i], b[i], tol) << n << " " << i;
        total += a[i];
      }
      EXPECT_NEAR(total, 1.0, 1e-5);
    }
  }
}

// Direct double-precision attention for one head: the truth both implementations approximate.
std::vector<double> attention_truth(const float* q, const float* k, const float* v, size_t n_pos,
                                    const AttentionParams& p, size_t h) {
  const size_t g = h / (p.n_heads / p.n_kv_heads);
  std::vector<double> s(n_pos);
  for (size_t t = 0; t < n_pos; ++t) {
    double d = 0.0;
    for (size_t i = 0; i < p.head_dim_k; ++i) {
      d += static_cast<double>(q[h * p.q_head_stride + i]) *
           k[t * p.k_pos_stride + g * p.head_dim_k + i];
    }
    s[t] = d * p.scale;
  }
  const double mx = *std::max_element(s.begin(), s.end());
  double sum = 0.0;
  for (auto& e : s) sum += (e = std::exp(e - mx));
  std::vector<double> out(p.head_dim_v, 0.0);
  for (size_t t = 0; t < n_pos; ++t) {
    for (size_t i = 0; i < p.head_dim_v; ++i) {
      out[i] += s[t] / sum * v[t * p.v_pos_stride + g * p.head_dim_v + i];
    }
  }
  return out;
}

TEST_P(SimdVsScalar, AttentionGqaAndMlaShapes) {
  std::mt19937 rng(11);
  struct Shape {
    size_t n_heads, n_kv_heads, dk, dv;
  };
  for (const Shape& s :
       {Shape{4, 4, 128, 128}, Shape{8, 2, 64, 64}, Shape{2, 2, 192, 128}, Shape{3, 1, 17, 9}}) {
    for (size_t n_pos : {1, 2, 5, 33, 200}) {
      const AttentionParams p = detail_params(s.n_heads, s.n_kv_heads, s.dk, s.dv);
      const auto q = random_floats(rng, s.n_heads * s.dk, -2.0f, 2.0f);
      const auto k = random_floats(rng, n_pos * s.n_kv_heads * s.dk, -2.0f, 2.0f);
      const auto v = random_floats(rng, n_pos * s.n_kv_heads * s.dv);
      std::vector<float> o_simd(s.n_heads * s.dv), o_ref(s.n_heads * s.dv), scratch(n_pos);
      simd().attention_heads(q.data(), k.data(), v.data(), n_pos, o_simd.data(), p, 0, s.n_heads,
                             scratch.data());
      ref().attention_heads(q.data(), k.data(), v.data(), n_pos, o_ref.data(), p, 0, s.n_heads,
                            scratch.data());
      for (size_t h = 0; h < s.n_heads; ++h) {
        const auto truth = attention_truth(q.data(), k.data(), v.data(), n_pos, resolved(p), h);
        // Score errors: a dot of dk terms with |q k| <= 4, scaled; they move the weights by
        // about twice that relatively; the weighted sum of n_pos values adds (n_pos + 32) eps.
        const double score_err =
            p.scale * dot_tolerance(s.dk, 4.0 * static_cast<double>(s.dk), false);
        const double tol =
            2.0 * (2.0 * score_err + (static_cast<double>(n_pos) + 32) * FLT_EPSILON);
        for (size_t i = 0; i < s.dv; ++i) {
          ASSERT_NEAR(o_simd[h * s.dv + i], o_ref[h * s.dv + i], tol) << "head " << h << " d " << i;
          ASSERT_NEAR(o_ref[h * s.dv + i], truth[i], tol) << "reference vs double, head " << h;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Isas, SimdVsScalar, ::testing::ValuesIn(kSimdIsas), isa_param_name);

}  // namespace
}  // namespace steermoe::kernels::testing
