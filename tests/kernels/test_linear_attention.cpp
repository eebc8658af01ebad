// Gated DeltaNet kernels against direct double-precision formulas written independently of the
// kernels (a whole-sequence causal convolution, the delta rule as matrix algebra).
#include "kernels/linear_attention.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace steermoe::kernels {
namespace {

std::vector<float> random_vec(size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

double silu_d(double x) { return x / (1.0 + std::exp(-x)); }

TEST(LinearAttentionKernels, ConvStepMatchesWholeSequenceCausalConv) {
  std::mt19937 rng(1);
  for (size_t k : {1u, 2u, 4u, 7u}) {
    const size_t C = 5, T = 9;
    const std::vector<float> w = random_vec(C * k, rng);
    const std::vector<float> xs = random_vec(T * C, rng);
    std::vector<float> state(C * (k - 1), 0.0f), out(C);
    for (size_t t = 0; t < T; ++t) {
      conv1d_silu_step(state.data(), &xs[t * C], w.data(), C, k, out.data());
      for (size_t c = 0; c < C; ++c) {
        // y_t = sum_j w[j] * x[t - (k - 1) + j], zero before the sequence.
        double acc = 0.0;
        for (size_t j = 0; j < k; ++j) {
          const long src = static_cast<long>(t) - static_cast<long>(k - 1) + static_cast<long>(j);
          if (src >= 0) acc += static_cast<double>(w[c * k + j]) * xs[static_cast<size_t>(src) * C + c];
        }
        EXPECT_NEAR(out[c], silu_d(acc), 1e-5) << "k " << k << " t " << t << " c " << c;
      }
    }
  }
}

TEST(LinearAttentionKernels, L2NormAndSoftplus) {
  std::mt19937 rng(2);
  std::vector<float> x = random_vec(33, rng, 3.0f);
  const std::vector<float> x0 = x;
  l2norm(x.data(), x.size(), 1e-6f);
  double ss = 0.0;
  for (float v : x0) ss += static_cast<double>(v) * v;
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(x[i], x0[i] / std::sqrt(ss + 1e-6), 1e-6);
  for (float v : {-30.0f, -3.0f, 0.0f, 0.5f, 19.0f, 25.0f}) {
    const double ref = v > 20.0f ? v : std::log(1.0 + std::exp(static_cast<double>(v)));
    EXPECT_NEAR(softplus(v), ref, 1e-5 * std::max(1.0, std::abs(ref))) << v;
  }
}

TEST(LinearAttentionKernels, DeltaRuleMatchesMatrixForm) {
  std::mt19937 rng(3);
  const size_t dk = 6, dv = 5, T = 7;
  std::vector<float> S(dk * dv, 0.0f), out(dv);
  std::vector<double> R(dk * dv, 0.0);  // reference state
  for (size_t t = 0; t < T; ++t) {
    std::vector<float> q = random_vec(dk, rng), k = random_vec(dk, rng), v = random_vec(dv, rng);
    l2norm(q.data(), dk, 1e-6f);
    l2norm(k.data(), dk, 1e-6f);
    const float g = -std::abs(random_vec(1, rng)[0]);
    const float beta = 1.0f / (1.0f + std::exp(-random_vec(1, rng)[0]));
    delta_rule_step(S.data(), q.data(), k.data(), v.data(), g, beta, dk, dv, out.data());
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
      EXPECT_NEAR(out[j], o, 1e-5) << "t " << t << " j " << j;
    }
    for (size_t i = 0; i < dk * dv; ++i) EXPECT_NEAR(S[i], R[i], 1e-5);
  }
}

TEST(LinearAttentionKernels, GatedRmsNorm) {
  std::mt19937 rng(4);
  const size_t n = 16;
  const std::vector<float> x = random_vec(n, rng), w = random_vec(n, rng), z = random_vec(n, rng);
  std::vector<float> out(n);
  rmsnorm_gated(x.data(), w.data(), z.data(), out.data(), n, 1e-6f);
  double ms = 0.0;
  for (float v : x) ms += static_cast<double>(v) * v;
  ms /= n;
  for (size_t i = 0; i < n; ++i) {
    const double ref = w[i] * (x[i] / std::sqrt(ms + 1e-6)) * silu_d(z[i]);
    EXPECT_NEAR(out[i], ref, 1e-5);
  }
}

}  // namespace
}  // namespace steermoe::kernels
