// Gated DeltaNet kernels: every implementation (the scalar reference and each SIMD path the CPU
// has) against direct double-precision formulas written independently of the kernels (a
// whole-sequence causal convolution, the delta rule as matrix algebra); then each SIMD path
// against the scalar reference over many sizes, steps with the state carried across, extreme
// gates and aliasing; per-path determinism; the free functions following set_active_isa().
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <random>
#include <vector>

#include "kernel_test_util.hpp"
#include "kernels/linear_attention.hpp"

namespace steermoe::kernels::testing {
namespace {

std::vector<float> random_vec(size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

double silu_d(double x) {
  return x / (1.0 + std::exp(-x));
}

// The scalar table and every SIMD table this CPU can run.
std::vector<const KernelTable*> available_tables() {
  std::vector<const KernelTable*> tables{&kernel_table(Isa::kScalar)};
  for (Isa isa : kSimdIsas) {
    if (isa_available(isa)) tables.push_back(&kernel_table(isa));
  }
  return tables;
}

// ---- Every implementation against double-precision formulas --------------------------------

TEST(LinearAttentionKernels, ConvStepMatchesWholeSequenceCausalConv) {
  for (const KernelTable* kt : available_tables()) {
    SCOPED_TRACE(isa_name(kt->isa));
    std::mt19937 rng(1);
    for (size_t k : {1u, 2u, 4u, 7u}) {
      const size_t C = 19, T = 9;
      const std::vector<float> w = random_vec(C * k, rng);
      const std::vector<float> xs = random_vec(T * C, rng);
      std::vector<float> state(C * (k - 1), 0.0f), out(C);
      for (size_t t = 0; t < T; ++t) {
        kt->conv1d_silu_step(state.data(), &xs[t * C], w.data(), C, k, out.data());
        for (size_t c = 0; c < C; ++c) {
          // y_t = sum_j w[j] * x[t - (k - 1) + j], zero before the sequence.
          double acc = 0.0;
          for (size_t j = 0; j < k; ++j) {
            const long src = static_cast<long>(t) - static_cast<long>(k - 1) + static_cast<long>(j);
            if (src >= 0)
              acc += static_cast<double>(w[c * k + j]) * xs[static_cast<size_t>(src) * C + c];
          }
          EXPECT_NEAR(out[c], silu_d(acc), 1e-5) << "k " << k << " t " << t << " c " << c;
        }
      }
    }
  }
}

TEST(LinearAttentionKernels, L2NormAndSoftplus) {
  for (const KernelTable* kt : available_tables()) {
    SCOPED_TRACE(isa_name(kt->isa));
    std::mt19937 rng(2);
    std::vector<float> x = random_vec(33, rng, 3.0f);
    const std::vector<float> x0 = x;
    kt->l2norm(x.data(), x.size(), 1e-6f);
    double ss = 0.0;
    for (float v : x0) ss += static_cast<double>(v) * v;
    for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(x[i], x0[i] / std::sqrt(ss + 1e-6), 1e-6);
  }
  for (float v : {-30.0f, -3.0f, 0.0f, 0.5f, 19.0f, 25.0f}) {
    const double ref = v > 20.0f ? v : std::log(1.0 + std::exp(static_cast<double>(v)));
    EXPECT_NEAR(softplus(v), ref, 1e-5 * std::max(1.0, std::abs(ref))) << v;
  }
}

TEST(LinearAttentionKernels, DeltaRuleMatchesMatrixForm) {
  for (const KernelTable* kt : available_tables()) {
    SCOPED_TRACE(isa_name(kt->isa));
    std::mt19937 rng(3);
    for (const auto& [dk, dv] : {std::pair<size_t, size_t>{6, 5}, {16, 19}, {33, 40}}) {
      const size_t T = 7;
      std::vector<float> S(dk * dv, 0.0f), out(dv);
      std::vector<double> R(dk * dv, 0.0);  // reference state
      for (size_t t = 0; t < T; ++t) {
        std::vector<float> q = random_vec(dk, rng), k = random_vec(dk, rng),
                           v = random_vec(dv, rng);
        reference::l2norm(q.data(), dk, 1e-6f);
        reference::l2norm(k.data(), dk, 1e-6f);
        const float g = -std::abs(random_vec(1, rng)[0]);
        const float beta = 1.0f / (1.0f + std::exp(-random_vec(1, rng)[0]));
        kt->delta_rule_step(S.data(), q.data(), k.data(), v.data(), g, beta, dk, dv, out.data());
        // R = exp(g) R + k (beta (v - (exp(g) R)^T k))^T ; o = R^T q
        for (double& r : R) r *= std::exp(static_cast<double>(g));
        std::vector<double> d(dv);
        for (size_t j = 0; j < dv; ++j) {
          double m = 0.0;
          for (size_t i = 0; i < dk; ++i) m += R[i * dv + j] * k[i];
          d[j] = (v[j] - m) * beta;
        }
        for (size_t i = 0; i < dk; ++i)
          for (size_t j = 0; j < dv; ++j) R[i * dv + j] += k[i] * d[j];
        for (size_t j = 0; j < dv; ++j) {
          double o = 0.0;
          for (size_t i = 0; i < dk; ++i) o += R[i * dv + j] * q[i];
          EXPECT_NEAR(out[j], o, 1e-5) << dk << "x" << dv << " t " << t << " j " << j;
        }
        for (size_t i = 0; i < dk * dv; ++i) EXPECT_NEAR(S[i], R[i], 1e-5);
      }
    }
  }
}

TEST(LinearAttentionKernels, GatedRmsNorm) {
  for (const KernelTable* kt : available_tables()) {
    SCOPED_TRACE(isa_name(kt->isa));
    std::mt19937 rng(4);
    for (size_t n : {16u, 21u}) {
      const std::vector<float> x = random_vec(n, rng), w = random_vec(n, rng),
                               z = random_vec(n, rng);
      std::vector<float> out(n);
      kt->rmsnorm_gated(x.data(), w.data(), z.data(), out.data(), n, 1e-6f);
      double ms = 0.0;
      for (float v : x) ms += static_cast<double>(v) * v;
      ms /= static_cast<double>(n);
      for (size_t i = 0; i < n; ++i) {
        const double ref = w[i] * (x[i] / std::sqrt(ms + 1e-6)) * silu_d(z[i]);
        EXPECT_NEAR(out[i], ref, 1e-5);
      }
    }
  }
}

// ---- Each SIMD path against the scalar reference ---------------------------------------------

class GatedDeltaNetSimd : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override { SM_REQUIRE_ISA(GetParam()); }
  const KernelTable& simd() const { return kernel_table(GetParam()); }
};

// Sizes around the vector widths (8, 16) and the column block (4 vectors: 32, 64).
const std::vector<size_t> kNormSizes = {1,  2,  3,  7,  8,   9,   15,  16,  17,
                                        31, 32, 33, 64, 100, 127, 128, 129, 300};

// |a - b| relative to the size of the values: ulps of (1 + |reference|).
double rel_diff(float got, float want) {
  return std::fabs(static_cast<double>(got) - want) / (1.0 + std::fabs(static_cast<double>(want)));
}

TEST_P(GatedDeltaNetSimd, ConvStepSumsAndStateEqualReferenceSiluWithinUlps) {
  std::mt19937 rng(11);
  // 513 channels: 8 SiLU chunks of 64 vectors on AVX2 (4 on AVX-512) plus a partial vector.
  for (size_t channels : {1u, 7u, 8u, 17u, 64u, 513u, 1100u}) {
    for (size_t k : {1u, 2u, 4u, 5u}) {
      const std::vector<float> w = random_vec(channels * k, rng, 0.7f);
      std::vector<float> st_simd(channels * (k - 1)), st_ref;
      st_simd = random_vec(st_simd.size(), rng);
      st_ref = st_simd;
      for (int t = 0; t < 5; ++t) {
        // Wide inputs: SiLU's tails (exp of large arguments) are exercised too.
        std::vector<float> x = random_vec(channels, rng, t == 4 ? 40.0f : 2.0f);
        std::vector<float> want(channels);
        reference::conv1d_silu_step(st_ref.data(), x.data(), w.data(), channels, k, want.data());
        // out aliases x (the engine's in-place call).
        simd().conv1d_silu_step(st_simd.data(), x.data(), w.data(), channels, k, x.data());
        ASSERT_EQ(st_simd, st_ref) << channels << " ch, k " << k << " t " << t;
        for (size_t c = 0; c < channels; ++c) {
          // SiLU of the same sum: the polynomial exp (a few ulp) and the division. Absolute
          // 1e-30 for sums near -88, whose SiLU is ~1e-37 (the SIMD exp clamps its argument at
          // 88.37, so e^88.5 is off there, on a result that is 0 for every purpose).
          const double tol = 8 * FLT_EPSILON * std::fabs(static_cast<double>(want[c])) + 1e-30;
          ASSERT_NEAR(x[c], want[c], tol) << channels << " ch, k " << k << " t " << t << " c " << c;
        }
      }
    }
  }
}

TEST_P(GatedDeltaNetSimd, L2NormMatchesReference) {
  std::mt19937 rng(12);
  for (size_t n : kNormSizes) {
    const std::vector<float> x0 = random_vec(n, rng, 3.0f);
    std::vector<float> got = x0, want = x0;
    simd().l2norm(got.data(), n, 1e-6f);
    reference::l2norm(want.data(), n, 1e-6f);
    for (size_t i = 0; i < n; ++i) {
      // Sums of squares differ by at most (n + 32) eps relative; the rsqrt halves that.
      const double tol = (0.5 * static_cast<double>(n + 32) + 4) * FLT_EPSILON *
                         std::fabs(static_cast<double>(want[i]));
      ASSERT_NEAR(got[i], want[i], tol + 1e-30) << n << " " << i;
    }
  }
}

TEST_P(GatedDeltaNetSimd, GatedRmsNormMatchesReferenceAlsoInPlace) {
  std::mt19937 rng(13);
  for (size_t n : kNormSizes) {
    const std::vector<float> x = random_vec(n, rng, 2.0f), w = random_vec(n, rng),
                             z = random_vec(n, rng, 4.0f);
    std::vector<float> want(n), got(n);
    reference::rmsnorm_gated(x.data(), w.data(), z.data(), want.data(), n, 1e-6f);
    simd().rmsnorm_gated(x.data(), w.data(), z.data(), got.data(), n, 1e-6f);
    for (size_t i = 0; i < n; ++i) {
      // The norm as in L2NormMatchesReference, plus SiLU's few ulp and two multiplies.
      const double tol = (0.5 * static_cast<double>(n + 32) + 16) * FLT_EPSILON *
                         std::fabs(static_cast<double>(want[i]));
      ASSERT_NEAR(got[i], want[i], tol + 1e-30) << n << " " << i;
    }
    std::vector<float> in_place = x;  // out aliases x
    simd().rmsnorm_gated(in_place.data(), w.data(), z.data(), in_place.data(), n, 1e-6f);
    EXPECT_EQ(in_place, got) << n;
  }
}

struct DeltaCase {
  size_t dk, dv;
};

// A step's inputs as the engine makes them: q, k L2-normalised, q scaled by dk^-0.5.
struct StepInputs {
  std::vector<float> q, k, v;
  float g, beta;
};

StepInputs step_inputs(std::mt19937& rng, size_t dk, size_t dv, int t) {
  StepInputs s{random_vec(dk, rng), random_vec(dk, rng), random_vec(dv, rng), 0.0f, 0.0f};
  reference::l2norm(s.q.data(), dk, 1e-6f);
  reference::l2norm(s.k.data(), dk, 1e-6f);
  for (float& x : s.q) x /= std::sqrt(static_cast<float>(dk));
  // Gates: ordinary, none (exp(0) = 1), very negative (exp underflows to a subnormal, then to 0);
  // beta 0 (no update), 1 (full replacement), in between.
  constexpr float kGates[] = {-0.3f, 0.0f, -2.5f, -90.0f, -1000.0f, -0.05f, -7.0f, -0.01f};
  constexpr float kBetas[] = {0.6f, 1.0f, 0.0f, 0.35f, 1.0f, 0.0f, 0.9f, 0.5f};
  s.g = kGates[t % 8];
  s.beta = kBetas[(t / 2 + t) % 8];
  return s;
}

TEST_P(GatedDeltaNetSimd, DeltaRuleMatchesReferenceOverStepsAndSizes) {
  std::mt19937 rng(14);
  // dv 59 and 56: three whole vectors after the blocks (and a partial one) on both widths.
  const DeltaCase cases[] = {{128, 128}, {64, 64}, {17, 17}, {1, 1},  {128, 17},
                             {17, 128},  {1, 64},  {64, 1},  {3, 40}, {40, 3},
                             {128, 100}, {32, 72}, {48, 59}, {9, 56}, {128, 255}};
  for (const DeltaCase& c : cases) {
    const size_t dk = c.dk, dv = c.dv;
    SCOPED_TRACE(::testing::Message() << "dk " << dk << " dv " << dv);
    std::vector<float> s_simd = random_vec(dk * dv, rng, 0.5f);
    std::vector<float> s_ref = s_simd;
    std::vector<float> out_simd(dv), out_ref(dv);
    double worst = 0.0;
    for (int t = 0; t < 12; ++t) {
      const StepInputs in = step_inputs(rng, dk, dv, t);
      reference::delta_rule_step(s_ref.data(), in.q.data(), in.k.data(), in.v.data(), in.g, in.beta,
                                 dk, dv, out_ref.data());
      simd().delta_rule_step(s_simd.data(), in.q.data(), in.k.data(), in.v.data(), in.g, in.beta,
                             dk, dv, out_simd.data());
      // Each value is a sum of dk products of O(1) terms, rounded per term (FMA in the SIMD
      // paths), and carries the previous steps' state differences. Measured: at most ~1 eps
      // relative to (1 + |value|) over these 12 steps; the bound is 2e-6 (~17 eps), the one
      // linear_attention.hpp states. A wrong formula misses by orders of magnitude more.
      const double tol = 2e-6;
      for (size_t j = 0; j < dv; ++j) {
        worst = std::max(worst, rel_diff(out_simd[j], out_ref[j]));
        ASSERT_LE(rel_diff(out_simd[j], out_ref[j]), tol)
            << "t " << t << " out " << j << ": " << out_simd[j] << " vs " << out_ref[j];
      }
      for (size_t i = 0; i < dk * dv; ++i) {
        worst = std::max(worst, rel_diff(s_simd[i], s_ref[i]));
        ASSERT_LE(rel_diff(s_simd[i], s_ref[i]), tol)
            << "t " << t << " S[" << i / dv << "][" << i % dv << "]: " << s_simd[i] << " vs "
            << s_ref[i];
      }
    }
    std::printf("[ delta  ] %s dk %3zu dv %3zu: max |simd - ref| / (1 + |ref|) = %.2g (%.1f eps)\n",
                std::string(isa_name(GetParam())).c_str(), dk, dv, worst, worst / FLT_EPSILON);
  }
}

// Gates that wipe the state: with decay 0 (exp(-1000)) the new state is k d^T, d = beta v, and
// out = (k . q) d, whatever the old state held; with beta 0 the state only decays.
TEST_P(GatedDeltaNetSimd, DeltaRuleExtremeGates) {
  std::mt19937 rng(15);
  const size_t dk = 40, dv = 37;
  std::vector<float> s = random_vec(dk * dv, rng, 100.0f), out(dv);
  StepInputs in = step_inputs(rng, dk, dv, 0);
  in.g = -1000.0f;
  in.beta = 1.0f;
  simd().delta_rule_step(s.data(), in.q.data(), in.k.data(), in.v.data(), in.g, in.beta, dk, dv,
                         out.data());
  double kq = 0.0;
  for (size_t i = 0; i < dk; ++i) kq += static_cast<double>(in.k[i]) * in.q[i];
  for (size_t i = 0; i < dk; ++i)
    for (size_t j = 0; j < dv; ++j) ASSERT_EQ(s[i * dv + j], in.k[i] * in.v[j]) << i << " " << j;
  for (size_t j = 0; j < dv; ++j) ASSERT_NEAR(out[j], kq * in.v[j], 1e-6) << j;
  // beta 0, g 0: the state is unchanged and out = S^T q.
  const std::vector<float> before = s;
  in.g = 0.0f;
  in.beta = 0.0f;
  simd().delta_rule_step(s.data(), in.q.data(), in.k.data(), in.v.data(), in.g, in.beta, dk, dv,
                         out.data());
  EXPECT_EQ(s, before);
  for (size_t j = 0; j < dv; ++j) {
    double o = 0.0;
    for (size_t i = 0; i < dk; ++i) o += static_cast<double>(before[i * dv + j]) * in.q[i];
    ASSERT_NEAR(out[j], o, 1e-5) << j;
  }
}

// Results depend only on the inputs and sizes: buffers at other alignments, and repeated calls,
// give the same bits.
TEST_P(GatedDeltaNetSimd, DeltaRuleIsDeterministicAcrossAlignments) {
  std::mt19937 rng(16);
  for (const DeltaCase c : {DeltaCase{128, 128}, DeltaCase{17, 33}}) {
    const size_t dk = c.dk, dv = c.dv;
    const std::vector<float> s0 = random_vec(dk * dv, rng);
    const StepInputs in = step_inputs(rng, dk, dv, 2);
    std::vector<float> first_state, first_out;
    for (size_t off : {0u, 1u, 3u, 5u, 0u}) {
      std::vector<float> buf(dk * dv + dv + 3 * dk + dv + 32);
      float* s = buf.data() + off;
      float* q = s + dk * dv;
      float* k = q + dk;
      float* v = k + dk;
      float* out = v + dv;
      std::copy(s0.begin(), s0.end(), s);
      std::copy(in.q.begin(), in.q.end(), q);
      std::copy(in.k.begin(), in.k.end(), k);
      std::copy(in.v.begin(), in.v.end(), v);
      simd().delta_rule_step(s, q, k, v, in.g, in.beta, dk, dv, out);
      std::vector<float> state(s, s + dk * dv), o(out, out + dv);
      if (first_state.empty()) {
        first_state = state;
        first_out = o;
      } else {
        EXPECT_EQ(state, first_state) << "offset " << off;
        EXPECT_EQ(o, first_out) << "offset " << off;
      }
    }
  }
}

// The free functions run the active Isa's kernels (what the engine calls).
TEST_P(GatedDeltaNetSimd, FreeFunctionsFollowTheActiveIsa) {
  const Isa saved = active_isa();
  set_active_isa(GetParam());
  std::mt19937 rng(17);
  const size_t dk = 128, dv = 128, channels = 300, k = 4;
  const std::vector<float> s0 = random_vec(dk * dv, rng);
  const StepInputs in = step_inputs(rng, dk, dv, 0);
  std::vector<float> s_free = s0, s_table = s0, o_free(dv), o_table(dv);
  delta_rule_step(s_free.data(), in.q.data(), in.k.data(), in.v.data(), in.g, in.beta, dk, dv,
                  o_free.data());
  simd().delta_rule_step(s_table.data(), in.q.data(), in.k.data(), in.v.data(), in.g, in.beta, dk,
                         dv, o_table.data());
  EXPECT_EQ(s_free, s_table);
  EXPECT_EQ(o_free, o_table);

  const std::vector<float> w = random_vec(channels * k, rng), x = random_vec(channels, rng, 3.0f);
  std::vector<float> st_free(channels * (k - 1)), st_table(channels * (k - 1));
  std::vector<float> c_free(channels), c_table(channels);
  conv1d_silu_step(st_free.data(), x.data(), w.data(), channels, k, c_free.data());
  simd().conv1d_silu_step(st_table.data(), x.data(), w.data(), channels, k, c_table.data());
  EXPECT_EQ(c_free, c_table);

  std::vector<float> n_free = x, n_table = x;
  l2norm(n_free.data(), channels, 1e-6f);
  simd().l2norm(n_table.data(), channels, 1e-6f);
  EXPECT_EQ(n_free, n_table);

  const std::vector<float> z = random_vec(dv, rng);
  std::vector<float> r_free(dv), r_table(dv);
  rmsnorm_gated(x.data(), w.data(), z.data(), r_free.data(), dv, 1e-6f);
  simd().rmsnorm_gated(x.data(), w.data(), z.data(), r_table.data(), dv, 1e-6f);
  EXPECT_EQ(r_free, r_table);
  set_active_isa(saved);
}

INSTANTIATE_TEST_SUITE_P(Isas, GatedDeltaNetSimd, ::testing::ValuesIn(kSimdIsas), isa_param_name);

}  // namespace
}  // namespace steermoe::kernels::testing
