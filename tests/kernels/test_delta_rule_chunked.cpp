// The chunked delta rule (kernels::delta_rule_chunked): every implementation against the
// token-by-token reference (n steps of reference::delta_rule_step) in output and final state,
// over chunk sizes, partial last chunks, n < C, n = 1, dk != dv, gates near 0 and strongly
// negative; each SIMD path against the scalar chunk reference; strides; the chunk boundaries
// counted from the call's first token; determinism.
#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "kernel_test_util.hpp"
#include "kernels/linear_attention.hpp"

namespace steermoe::kernels::testing {
namespace {

// n tokens of one head as the engine makes them: q, k L2-normalised, q scaled by dk^-0.5, beta in
// [0, 1], g <= 0 from `gates` (cycled).
struct Sequence {
  size_t n, dk, dv;
  std::vector<float> q, k, v, g, beta, state;
};

Sequence make_sequence(size_t n, size_t dk, size_t dv, const std::vector<float>& gates,
                       uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  Sequence s{n, dk, dv, {}, {}, {}, {}, {}, {}};
  s.q.resize(n * dk);
  s.k.resize(n * dk);
  s.v.resize(n * dv);
  for (float& x : s.q) x = normal(rng);
  for (float& x : s.k) x = normal(rng);
  for (float& x : s.v) x = normal(rng);
  for (size_t t = 0; t < n; ++t) {
    reference::l2norm(&s.q[t * dk], dk, 1e-6f);
    reference::l2norm(&s.k[t * dk], dk, 1e-6f);
    for (size_t i = 0; i < dk; ++i) s.q[t * dk + i] /= std::sqrt(static_cast<float>(dk));
    s.g.push_back(gates[t % gates.size()]);
    // beta 0 and 1 (no update, full replacement) now and then, else uniform.
    s.beta.push_back(t % 11 == 3 ? 0.0f : t % 13 == 5 ? 1.0f : unit(rng));
  }
  s.state.resize(dk * dv);
  for (float& x : s.state) x = 0.5f * normal(rng);  // a state carried in from earlier tokens
  return s;
}

struct Result {
  std::vector<float> out, state;
};

Result token_by_token(const Sequence& s) {
  Result r{std::vector<float>(s.n * s.dv), s.state};
  for (size_t t = 0; t < s.n; ++t) {
    reference::delta_rule_step(r.state.data(), &s.q[t * s.dk], &s.k[t * s.dk], &s.v[t * s.dv],
                               s.g[t], s.beta[t], s.dk, s.dv, &r.out[t * s.dv]);
  }
  return r;
}

Result chunked(const KernelTable& kt, const Sequence& s, size_t chunk) {
  Result r{std::vector<float>(s.n * s.dv), s.state};
  kt.delta_rule_chunked(r.state.data(), s.q.data(), s.k.data(), s.v.data(), s.g.data(),
                        s.beta.data(), r.out.data(),
                        {.n = s.n, .dk = s.dk, .dv = s.dv, .chunk = chunk});
  return r;
}

// max |got - want| / (1 + |want|).
double worst_rel(const std::vector<float>& got, const std::vector<float>& want) {
  EXPECT_EQ(got.size(), want.size());
  double w = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = std::fabs(static_cast<double>(got[i]) - want[i]);
    w = std::max(w, std::isnan(d) ? INFINITY : d / (1.0 + std::fabs(static_cast<double>(want[i]))));
  }
  return w;
}

std::vector<const KernelTable*> available_tables() {
  std::vector<const KernelTable*> tables{&kernel_table(Isa::kScalar)};
  for (Isa isa : kSimdIsas) {
    if (isa_available(isa)) tables.push_back(&kernel_table(isa));
  }
  return tables;
}

struct Shape {
  size_t dk, dv;
};
// The Qwen3.6 / Qwen3-Next head (128 x 128), dk != dv both ways, widths that are not whole
// vectors (AVX2 8, AVX-512 16) or column blocks (2 vectors), dims of 1.
const Shape kShapes[] = {{128, 128}, {64, 24}, {17, 59}, {40, 3}, {1, 9}, {9, 1}};

// Gates as the engine makes them (g = -exp(A_log) softplus(...) <= 0): ordinary, near 0 (no
// decay), strongly negative (the state is wiped within a token; e^{G} underflows to 0).
const std::vector<std::vector<float>> kGateSets = {
    {-0.3f, -0.05f, -1.2f, -0.6f},
    {0.0f, -1e-4f, -1e-6f, 0.0f},
    {-7.0f, -90.0f, -1000.0f, -20.0f, -0.1f},
};

// Within one chunk the chunked form replaces the recurrence's per-token products by sums over
// the chunk's tokens (O(C) terms), the dot products k_t . k_s and q_t . k_s (dk terms) and e^{G_t
// - G_s} in place of a product of e^{g}; each is rounded once per term, and both forms' rounding
// accumulates over the n steps, most with gates near 0 (nothing decays: the state sums every
// token). Measured over these cases (n <= 197, C <= 64): at most 1.9e-6 (16 eps) relative to
// (1 + |value|), in the state with gates near 0; with ordinary gates ~4e-7. The bound 1e-5 (~84
// eps) is 5x that; a wrong term (a decay off by one token, a missing beta, the state read after
// its update) misses by 1e-3 or more.
constexpr double kChunkedVsRecurrent = 1e-5;

TEST(DeltaRuleChunked, MatchesTokenByTokenOverChunkSizesAndShapes) {
  for (const KernelTable* kt : available_tables()) {
    SCOPED_TRACE(isa_name(kt->isa));
    double worst = 0.0;
    uint32_t seed = 1;
    for (const Shape& shape : kShapes) {
      for (size_t gi = 0; gi < kGateSets.size(); ++gi) {
        for (size_t chunk : {1u, 3u, 4u, 8u, 16u, 32u, 64u}) {
          // n = 1, n < C, n = C, n a multiple of C, n not a multiple of C.
          for (size_t n : {size_t{1}, chunk > 1 ? chunk - 1 : 2, chunk, 3 * chunk, 2 * chunk + 5}) {
            SCOPED_TRACE(::testing::Message()
                         << "dk " << shape.dk << " dv " << shape.dv << " gates " << gi << " chunk "
                         << chunk << " n " << n);
            const Sequence s = make_sequence(n, shape.dk, shape.dv, kGateSets[gi], seed++);
            const Result want = token_by_token(s);
            const Result got = chunked(*kt, s, chunk);
            const double e_out = worst_rel(got.out, want.out);
            const double e_state = worst_rel(got.state, want.state);
            worst = std::max({worst, e_out, e_state});
            ASSERT_LE(e_out, kChunkedVsRecurrent) << "out";
            ASSERT_LE(e_state, kChunkedVsRecurrent) << "state";
          }
        }
      }
    }
    std::printf(
        "[ chunked ] %s: max |chunked - token by token| / (1 + |value|) = %.2g (%.1f eps)\n",
        std::string(isa_name(kt->isa)).c_str(), worst, worst / FLT_EPSILON);
  }
}

// The chunk boundaries are counted from the call's first token: one call of n tokens equals
// calls of C, C, ..., rest tokens with the state carried, bit for bit; and a call split elsewhere
// rounds differently (which is why the engine documents where its chunks start).
TEST(DeltaRuleChunked, ChunksStartAtTheCallsFirstToken) {
  for (const KernelTable* kt : available_tables()) {
    SCOPED_TRACE(isa_name(kt->isa));
    const size_t chunk = 8, n = 21;
    const Sequence s = make_sequence(n, 32, 24, kGateSets[0], 77);
    const Result whole = chunked(*kt, s, chunk);
    Result parts{std::vector<float>(n * s.dv), s.state};
    for (size_t t0 = 0; t0 < n; t0 += chunk) {
      const size_t len = std::min(chunk, n - t0);
      kt->delta_rule_chunked(parts.state.data(), &s.q[t0 * s.dk], &s.k[t0 * s.dk], &s.v[t0 * s.dv],
                             &s.g[t0], &s.beta[t0], &parts.out[t0 * s.dv],
                             {.n = len, .dk = s.dk, .dv = s.dv, .chunk = chunk});
    }
    EXPECT_EQ(parts.out, whole.out);
    EXPECT_EQ(parts.state, whole.state);
    // Split after 5 tokens instead: chunks [0, 5), [5, 13), [13, 21).
    Result shifted{std::vector<float>(n * s.dv), s.state};
    for (const auto& [t0, len] : {std::pair<size_t, size_t>{0, 5}, {5, 16}}) {
      kt->delta_rule_chunked(shifted.state.data(), &s.q[t0 * s.dk], &s.k[t0 * s.dk],
                             &s.v[t0 * s.dv], &s.g[t0], &s.beta[t0], &shifted.out[t0 * s.dv],
                             {.n = len, .dk = s.dk, .dv = s.dv, .chunk = chunk});
    }
    EXPECT_NE(shifted.state, whole.state);
    EXPECT_LE(worst_rel(shifted.state, whole.state), kChunkedVsRecurrent);
  }
}

// The strides the engine uses (q, k and v inside a token's conv row, out inside a token's
// [heads][dv] row, g and beta inside [token][heads]) give the bits of the packed call.
TEST(DeltaRuleChunked, StridedInputsGiveThePackedResult) {
  for (const KernelTable* kt : available_tables()) {
    SCOPED_TRACE(isa_name(kt->isa));
    const size_t n = 37, dk = 16, dv = 12, chunk = 16;
    const Sequence s = make_sequence(n, dk, dv, kGateSets[0], 5);
    const Result packed = chunked(*kt, s, chunk);
    const size_t qs = 3 * dk + 5, vs = dv + 7, os = 2 * dv + 1, gs = 3;
    std::vector<float> q(n * qs, NAN), k(n * qs, NAN), v(n * vs, NAN), g(n * gs, NAN),
        beta(n * gs, NAN), out(n * os, -7.0f);
    for (size_t t = 0; t < n; ++t) {
      std::copy_n(&s.q[t * dk], dk, &q[t * qs]);
      std::copy_n(&s.k[t * dk], dk, &k[t * qs + 1]);
      std::copy_n(&s.v[t * dv], dv, &v[t * vs]);
      g[t * gs] = s.g[t];
      beta[t * gs] = s.beta[t];
    }
    std::vector<float> state = s.state;
    kt->delta_rule_chunked(state.data(), q.data(), k.data() + 1, v.data(), g.data(), beta.data(),
                           out.data(),
                           {.n = n,
                            .dk = dk,
                            .dv = dv,
                            .chunk = chunk,
                            .qk_stride = qs,
                            .v_stride = vs,
                            .out_stride = os,
                            .gate_stride = gs});
    EXPECT_EQ(state, packed.state);
    for (size_t t = 0; t < n; ++t) {
      for (size_t j = 0; j < dv; ++j) ASSERT_EQ(out[t * os + j], packed.out[t * dv + j]) << t;
      for (size_t j = dv; j < os; ++j) ASSERT_EQ(out[t * os + j], -7.0f) << "written past dv";
    }
  }
}

// ---- Each SIMD path against the scalar chunk reference -----------------------------------------

class DeltaRuleChunkedSimd : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override { SM_REQUIRE_ISA(GetParam()); }
  const KernelTable& simd() const { return kernel_table(GetParam()); }
};

// The SIMD path computes the reference's formulas in the same order of terms, with FMA, the
// polynomial exp (a few ulp) for the decays and lane trees in the dot products. Measured: at most
// 1.7e-6 relative to (1 + |value|) (n = 300, C = 256, gates near 0, where the state sums every
// token's rounding), typically ~1e-7; the bound is 1e-5 (the chunked-vs-recurrent one, 6x the
// worst seen).
constexpr double kSimdVsScalarChunk = 1e-5;
TEST_P(DeltaRuleChunkedSimd, MatchesScalarChunkReference) {
  double worst = 0.0;
  uint32_t seed = 100;
  for (const Shape& shape : kShapes) {
    for (size_t gi = 0; gi < kGateSets.size(); ++gi) {
      for (size_t chunk : {1u, 5u, 32u, 64u, 256u}) {
        for (size_t n : {size_t{1}, size_t{7}, chunk + 3, size_t{300}}) {
          SCOPED_TRACE(::testing::Message() << "dk " << shape.dk << " dv " << shape.dv << " gates "
                                            << gi << " chunk " << chunk << " n " << n);
          const Sequence s = make_sequence(n, shape.dk, shape.dv, kGateSets[gi], seed++);
          const Result want = chunked(kernel_table(Isa::kScalar), s, chunk);
          const Result got = chunked(simd(), s, chunk);
          const double e = std::max(worst_rel(got.out, want.out), worst_rel(got.state, want.state));
          worst = std::max(worst, e);
          ASSERT_LE(e, kSimdVsScalarChunk);
        }
      }
    }
  }
  std::printf("[ chunked ] %s vs scalar chunk reference: max rel %.2g (%.1f eps)\n",
              std::string(isa_name(GetParam())).c_str(), worst, worst / FLT_EPSILON);
}

// Same inputs, same bits: repeated calls, and inputs at another alignment.
TEST_P(DeltaRuleChunkedSimd, IsDeterministicAcrossCallsAndAlignments) {
  const size_t n = 45, dk = 40, dv = 33, chunk = 16;
  const Sequence s = make_sequence(n, dk, dv, kGateSets[0], 9);
  const Result a = chunked(simd(), s, chunk);
  const Result b = chunked(simd(), s, chunk);
  EXPECT_EQ(a.out, b.out);
  EXPECT_EQ(a.state, b.state);
  for (size_t shift : {1u, 3u}) {
    std::vector<float> q(n * dk + shift), k(n * dk + shift), v(n * dv + shift),
        state(dk * dv + shift), out(n * dv + shift);
    std::copy(s.q.begin(), s.q.end(), q.begin() + static_cast<long>(shift));
    std::copy(s.k.begin(), s.k.end(), k.begin() + static_cast<long>(shift));
    std::copy(s.v.begin(), s.v.end(), v.begin() + static_cast<long>(shift));
    std::copy(s.state.begin(), s.state.end(), state.begin() + static_cast<long>(shift));
    simd().delta_rule_chunked(state.data() + shift, q.data() + shift, k.data() + shift,
                              v.data() + shift, s.g.data(), s.beta.data(), out.data() + shift,
                              {.n = n, .dk = dk, .dv = dv, .chunk = chunk});
    EXPECT_TRUE(std::equal(a.out.begin(), a.out.end(), out.begin() + static_cast<long>(shift)));
    EXPECT_TRUE(
        std::equal(a.state.begin(), a.state.end(), state.begin() + static_cast<long>(shift)));
  }
}

INSTANTIATE_TEST_SUITE_P(Isas, DeltaRuleChunkedSimd, ::testing::ValuesIn(kSimdIsas),
                         isa_param_name);

}  // namespace
}  // namespace steermoe::kernels::testing
