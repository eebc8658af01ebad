// The op set of every backend against a scalar reference (in the style of llama.cpp's
// test-backend-ops): each op of engine::Ops, over a few shapes and weight types, on the CPU at
// every instruction set this CPU has (the scalar kernels included) and on CUDA when the build has
// it and a GPU is present (otherwise the CUDA cases skip with the reason). The reference is
// written here, in double precision, from the ops' definitions in ops.hpp; every tolerance is
// derived from the inputs of the element it bounds (unit roundoff times the sizes and magnitudes
// involved, plus the input roundings a kernel documents: bf16 x on AVX-512 BF16, int8 x for
// block-quantized weights). The same file is built into test_cuda.
#include "engine/ops.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "engine/cpu/cpu_ops.hpp"
#include "engine/cuda_backend_factory.hpp"
#include "kernels/kernels.hpp"
#include "model/dtype.hpp"
#include "model/weights.hpp"

namespace steermoe::engine {
namespace {

using kernels::DType;
constexpr double kU = 1.0 / (1 << 24);  // unit roundoff of f32

// Sizes every test's ops are made for.
constexpr int kBatch = 6, kHidden = 64, kFfn = 64, kExperts = 8, kTopK = 3, kContext = 16,
              kHeads = 8;

struct Backend {
  std::string name;
  bool cuda = false;
  kernels::Isa isa = kernels::Isa::kScalar;
};

void PrintTo(const Backend& b, std::ostream* os) {
  *os << b.name;
}

std::vector<Backend> backends() {
  return {{"cpu_scalar", false, kernels::Isa::kScalar},
          {"cpu_avx2", false, kernels::Isa::kAvx2},
          {"cpu_avx512", false, kernels::Isa::kAvx512},
          {"cpu_avx512bf16", false, kernels::Isa::kAvx512Bf16},
          {"cuda", true, kernels::Isa::kScalar}};
}

std::vector<float> random_floats(std::mt19937& rng, size_t n, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// A weight matrix stored in `dtype` (quantized through the model's encoder) with its values as
// the reference reads them (kernels::dequantize_row, exact for the stored type).
struct HostMatrix {
  HostMatrix(std::mt19937& rng, DType dtype, size_t rows, size_t cols) {
    const std::vector<float> v = random_floats(rng, rows * cols);
    const model::DType md = model::model_dtype(dtype);
    bytes.resize(*model::dtype_byte_size(md, v.size()));
    model::convert_from_f32(md, v, bytes, "test matrix");
    m = {.data = bytes.data(), .dtype = dtype, .rows = rows, .cols = cols};
    values.resize(rows * cols);
    for (size_t r = 0; r < rows; ++r) kernels::dequantize_row(m, r, &values[r * cols]);
  }
  // Bound on |computed - exact| of row r of W x: f32 accumulation, plus the rounding of x the
  // kernels document for this type.
  double tolerance(size_t r, const float* x) const {
    double abs = 0.0, quant = 0.0;
    for (size_t c = 0; c < m.cols; ++c) abs += std::fabs(values[r * m.cols + c] * double{x[c]});
    double tol = 2.0 * static_cast<double>(m.cols + 2) * kU * abs;
    if (m.dtype == DType::kBF16) tol += abs / 256.0;  // x rounded to bf16 (AVX-512 BF16)
    if (kernels::dtype_is_block(m.dtype)) {
      // x quantized to int8 per 32 elements: |error| <= max |x of the block| / 254.
      for (size_t c0 = 0; c0 < m.cols; c0 += 32) {
        double amax = 0.0;
        for (size_t c = c0; c < c0 + 32; ++c) amax = std::max(amax, std::fabs(double{x[c]}));
        for (size_t c = c0; c < c0 + 32; ++c)
          quant += std::fabs(double{values[r * m.cols + c]}) * amax / 254.0 * 1.01;
      }
    }
    return tol + quant + 1e-30;
  }
  double dot(size_t r, const float* x) const {
    double s = 0.0;
    for (size_t c = 0; c < m.cols; ++c) s += double{values[r * m.cols + c]} * x[c];
    return s;
  }
  kernels::Matrix m;
  std::vector<std::byte> bytes;
  std::vector<float> values;
};

double sigmoid(double x) {
  return 1.0 / (1.0 + std::exp(-x));
}
double silu(double x) {
  return x * sigmoid(x);
}

class BackendOps : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    const Backend& b = GetParam();
    if (b.cuda) {
      std::string why;
      if (!cuda_backend_available(&why)) GTEST_SKIP() << "no GPU, CUDA op test skipped: " << why;
      ops_ = make_cuda_ops({.max_batch = kBatch,
                            .context = kContext,
                            .max_heads = kHeads,
                            .hidden = kHidden,
                            .expert_ffn = kFfn,
                            .top_k = kTopK});
      return;
    }
    if (!kernels::isa_available(b.isa))
      GTEST_SKIP() << "CPU lacks the features of " << kernels::isa_name(b.isa);
    saved_isa_ = kernels::active_isa();
    kernels::set_active_isa(b.isa);
    isa_set_ = true;
    ops_ = std::make_unique<CpuOps>(CpuOpsParams{.threads = 2,
                                                 .max_batch = kBatch,
                                                 .hidden = kHidden,
                                                 .expert_ffn = kFfn,
                                                 .experts = kExperts,
                                                 .top_k = kTopK});
  }
  void TearDown() override {
    ops_.reset();
    if (isa_set_) kernels::set_active_isa(saved_isa_);
  }

  // Backend copies of host data, and back.
  float* put(const std::vector<float>& v) {
    float* d = ops_->alloc(v.size());
    ops_->upload(d, v.data(), v.size());
    return d;
  }
  std::vector<float> get(const float* d, size_t n) {
    std::vector<float> h(n);
    ops_->download(h.data(), d, n);
    ops_->sync();
    return h;
  }
  // False (the case is skipped) when the backend cannot compute with this weight type.
  bool prepare(const kernels::Matrix& m) {
    try {
      ops_->prepare(m);
      return true;
    } catch (const Error& e) {
      EXPECT_TRUE(GetParam().cuda) << "the CPU computes with every type: " << e.what();
      return false;
    }
  }

  std::mt19937 rng_{20240607};
  std::unique_ptr<Ops> ops_;
  kernels::Isa saved_isa_ = kernels::Isa::kScalar;
  bool isa_set_ = false;
};

TEST_P(BackendOps, MatmulOverEveryWeightType) {
  int ran = 0;
  for (const DType t : {DType::kF32, DType::kBF16, DType::kF16, DType::kQ8_0, DType::kQ4_0,
                        DType::kQ4_K, DType::kQ6_K}) {
    for (const int n : {1, 4}) {
      SCOPED_TRACE(std::string(kernels::dtype_name(t)) + " n " + std::to_string(n));
      // Three products in one call (decode: one synchronisation), different shapes.
      std::vector<HostMatrix> w;
      for (const size_t rows : {5, 17, 9}) w.emplace_back(rng_, t, rows, size_t{256});
      bool ok = true;
      for (const HostMatrix& h : w) ok = ok && prepare(h.m);
      if (!ok) continue;
      std::vector<std::vector<float>> x;  // each product its own input
      std::vector<Product> p;
      std::vector<float*> dy;
      for (const HostMatrix& h : w) {
        x.push_back(random_floats(rng_, static_cast<size_t>(n) * 256));
        dy.push_back(ops_->alloc(static_cast<size_t>(n) * h.m.rows));
        p.push_back({.w = &h.m, .x = put(x.back()), .y = dy.back()});
      }
      ops_->matmul(p, n);
      for (size_t i = 0; i < w.size(); ++i) {
        const size_t rows = w[i].m.rows;
        const std::vector<float> y = get(dy[i], static_cast<size_t>(n) * rows);
        for (size_t t2 = 0; t2 < static_cast<size_t>(n); ++t2) {
          for (size_t r = 0; r < rows; ++r) {
            const float* xt = &x[i][t2 * 256];
            ASSERT_NEAR(y[t2 * rows + r], w[i].dot(r, xt), w[i].tolerance(r, xt))
                << "product " << i << " token " << t2 << " row " << r;
          }
        }
      }
      ++ran;
    }
  }
  EXPECT_GE(ran, 6);  // F32, BF16 and F16 run everywhere
}

TEST_P(BackendOps, RmsnormRowsWithStridesAndWithoutWeight) {
  const int rows = 3, dim = 40;
  const int64_t xs = 48, os = 44;
  const std::vector<float> x = random_floats(rng_, static_cast<size_t>(rows * xs));
  const std::vector<float> w = random_floats(rng_, dim, 0.5f, 1.5f);
  ops_->prepare(w);
  for (const bool weighted : {true, false}) {
    float* dout = ops_->alloc(static_cast<size_t>(rows * os));
    ops_->rmsnorm(put(x), xs, weighted ? std::span<const float>(w) : std::span<const float>(), dout,
                  os, rows, dim, 1e-5f);
    const std::vector<float> out = get(dout, static_cast<size_t>(rows * os));
    for (int r = 0; r < rows; ++r) {
      double ss = 0.0;
      for (int i = 0; i < dim; ++i) ss += double{x[r * xs + i]} * x[r * xs + i];
      const double inv = 1.0 / std::sqrt(ss / dim + 1e-5);
      for (int i = 0; i < dim; ++i) {
        const double ref = x[r * xs + i] * inv * (weighted ? w[static_cast<size_t>(i)] : 1.0);
        ASSERT_NEAR(out[r * os + i], ref, 4.0 * (dim + 4) * kU * std::fabs(ref) + 1e-30)
            << "row " << r << " element " << i << (weighted ? "" : " (no weight)");
      }
    }
  }
}

// The rotation of one token's heads as the op defines it, in double from the f32 angle.
std::vector<double> rope_ref(const std::vector<float>& x, int heads, int pos, const RopeSpec& s,
                             const std::vector<float>& inv_freq, std::vector<double>* tol) {
  std::vector<double> out(x.begin(), x.end());
  const int half = s.rot_dim / 2;
  for (int h = 0; h < heads; ++h) {
    for (int i = 0; i < half; ++i) {
      const double inv = inv_freq.empty() ? std::pow(double{s.theta}, -2.0 * i / s.rot_dim)
                                          : double{inv_freq[static_cast<size_t>(i)]};
      const double angle = static_cast<double>(static_cast<float>(pos) * static_cast<float>(inv));
      const bool il = s.style == kernels::RopeStyle::kInterleaved;
      const size_t i0 = static_cast<size_t>(h * s.head_stride + s.rot_offset + (il ? 2 * i : i));
      const size_t i1 = i0 + (il ? 1 : static_cast<size_t>(half));
      const double c = std::cos(angle) * s.attention_factor;
      const double sn = std::sin(angle) * s.attention_factor;
      out[i0] = x[i0] * c - x[i1] * sn;
      out[i1] = x[i0] * sn + x[i1] * c;
      // Roundings of the frequency, the angle, cos / sin and the products.
      const double bound = (std::fabs(x[i0]) + std::fabs(x[i1])) * s.attention_factor *
                           (16.0 * kU + 8.0 * kU * std::fabs(angle));
      (*tol)[i0] = (*tol)[i1] = bound + 1e-30;
    }
  }
  return out;
}

TEST_P(BackendOps, RopeNeoxInterleavedPartialAndScaled) {
  struct Case {
    kernels::RopeStyle style;
    int head_stride, rot_offset, rot_dim;
    bool scaled;
  };
  for (const Case c : {Case{kernels::RopeStyle::kNeox, 16, 0, 16, false},
                       Case{kernels::RopeStyle::kNeox, 16, 0, 4, false},          // partial rotary
                       Case{kernels::RopeStyle::kInterleaved, 24, 16, 8, false},  // MLA q
                       Case{kernels::RopeStyle::kNeox, 16, 0, 8, true}}) {        // YaRN
    SCOPED_TRACE("head " + std::to_string(c.head_stride) + " offset " +
                 std::to_string(c.rot_offset) + " rot " + std::to_string(c.rot_dim) +
                 (c.scaled ? " scaled" : ""));
    const int heads = 3, n = 3, pos0 = 5;
    const int64_t ts = heads * c.head_stride + 5;  // tokens apart by more than their heads
    const std::vector<float> x = random_floats(rng_, static_cast<size_t>(n * ts));
    std::vector<float> inv;
    RopeSpec spec{.style = c.style,
                  .head_stride = c.head_stride,
                  .rot_offset = c.rot_offset,
                  .rot_dim = c.rot_dim,
                  .theta = 10000.0f};
    if (c.scaled) {
      inv = random_floats(rng_, static_cast<size_t>(c.rot_dim / 2), 0.01f, 1.0f);
      spec.inv_freq = put(inv);
      spec.attention_factor = 1.25f;
    }
    float* dx = put(x);
    ops_->rope(dx, n, ts, heads, pos0, spec);
    const std::vector<float> got = get(dx, x.size());
    for (int t = 0; t < n; ++t) {
      const std::vector<float> tok(x.begin() + t * ts, x.begin() + (t + 1) * ts);
      std::vector<double> tol(tok.size(), 0.0);
      const std::vector<double> ref = rope_ref(tok, heads, pos0 + t, spec, inv, &tol);
      for (size_t i = 0; i < tok.size(); ++i)
        ASSERT_NEAR(got[static_cast<size_t>(t * ts) + i], ref[i], tol[i])
            << "token " << t << " element " << i;
    }
  }
}

TEST_P(BackendOps, AttentionDecodeAndPrefillOverTheCache) {
  struct Case {
    AttentionSpec spec;
    int n, pos0;
  };
  for (const Case c : {Case{{.heads = 4, .kv_heads = 2, .dk = 16, .dv = 16}, 1, 9},
                       Case{{.heads = 4, .kv_heads = 2, .dk = 16, .dv = 16}, 4, 2},
                       Case{{.heads = 3, .kv_heads = 3, .dk = 24, .dv = 8}, 5, 0}}) {
    AttentionSpec s = c.spec;
    s.scale = 1.0f / std::sqrt(static_cast<float>(s.dk));
    SCOPED_TRACE("heads " + std::to_string(s.heads) + "/" + std::to_string(s.kv_heads) + " n " +
                 std::to_string(c.n) + " pos0 " + std::to_string(c.pos0));
    const auto kw = static_cast<size_t>(s.kv_heads * s.dk),
               vw = static_cast<size_t>(s.kv_heads * s.dv);
    const std::vector<float> q = random_floats(rng_, static_cast<size_t>(c.n * s.heads * s.dk));
    const std::vector<float> k = random_floats(rng_, kContext * kw, -2.0f, 2.0f);
    const std::vector<float> v = random_floats(rng_, kContext * vw);
    float* dout = ops_->alloc(static_cast<size_t>(c.n * s.heads * s.dv));
    ops_->attention(put(q), put(k), put(v), dout, c.n, c.pos0, s);
    const std::vector<float> out = get(dout, static_cast<size_t>(c.n * s.heads * s.dv));
    const int group = s.heads / s.kv_heads;
    for (int t = 0; t < c.n; ++t) {
      for (int h = 0; h < s.heads; ++h) {
        const int positions = c.pos0 + t + 1;
        const float* qh = &q[static_cast<size_t>((t * s.heads + h) * s.dk)];
        const size_t g = static_cast<size_t>(h / group);
        std::vector<double> p(static_cast<size_t>(positions));
        double mx = -1e300, sum = 0.0, score_err = 0.0;
        for (int j = 0; j < positions; ++j) {
          double d = 0.0, abs = 0.0;
          for (int i = 0; i < s.dk; ++i) {
            const double e =
                double{qh[i]} * k[static_cast<size_t>(j) * kw + g * static_cast<size_t>(s.dk) +
                                  static_cast<size_t>(i)];
            d += e;
            abs += std::fabs(e);
          }
          p[static_cast<size_t>(j)] = d * s.scale;
          score_err = std::max(score_err, 2.0 * (s.dk + 2) * kU * abs * s.scale);
          mx = std::max(mx, p[static_cast<size_t>(j)]);
        }
        for (double& e : p) sum += (e = std::exp(e - mx));
        for (int d = 0; d < s.dv; ++d) {
          double ref = 0.0, mag = 0.0;
          for (int j = 0; j < positions; ++j) {
            const double vj = v[static_cast<size_t>(j) * vw + g * static_cast<size_t>(s.dv) +
                                static_cast<size_t>(d)];
            ref += p[static_cast<size_t>(j)] / sum * vj;
            mag += p[static_cast<size_t>(j)] / sum * std::fabs(vj);
          }
          // Score errors move the weights by e^(2 err) - 1; the sums add (positions + 8) u.
          const double tol = mag * (4.0 * score_err + 8.0 * (positions + 8) * kU) + 1e-30;
          ASSERT_NEAR(out[static_cast<size_t>((t * s.heads + h) * s.dv + d)], ref, tol)
              << "token " << t << " head " << h << " dim " << d;
        }
      }
    }
  }
}

TEST_P(BackendOps, ElementwiseSwigluAddClampSigmoidMul) {
  const size_t n = 301;
  const std::vector<float> a = random_floats(rng_, n, -6.0f, 6.0f);
  const std::vector<float> b = random_floats(rng_, n, -3.0f, 3.0f);
  float* out = ops_->alloc(n);
  const auto check = [&](const char* op, auto ref_of, double rel) {
    const std::vector<float> got = get(out, n);
    for (size_t i = 0; i < n; ++i) {
      const double ref = ref_of(double{a[i]}, double{b[i]});
      ASSERT_NEAR(got[i], ref, rel * kU * std::fabs(ref) + 1e-30) << op << " element " << i;
    }
  };
  ops_->swiglu(put(a), put(b), out, static_cast<int64_t>(n));
  check(
      "swiglu", [](double g, double u) { return silu(g) * u; }, 32.0);
  ops_->add(put(a), put(b), out, static_cast<int64_t>(n));
  check(
      "add", [](double x, double y) { return x + y; }, 1.0);
  ops_->upload(out, a.data(), n);
  ops_->clamp(out, static_cast<int64_t>(n), 2.5f);
  check(
      "clamp", [](double x, double) { return std::clamp(x, -2.5, 2.5); }, 0.0);
  ops_->upload(out, a.data(), n);
  ops_->sigmoid_mul(out, put(b), static_cast<int64_t>(n));
  check(
      "sigmoid_mul", [](double x, double g) { return x * sigmoid(g); }, 32.0);
}

TEST_P(BackendOps, SigmoidDotScaleGatesEachRow) {
  const int rows = 3, dim = 64;
  const std::vector<float> x = random_floats(rng_, static_cast<size_t>(rows * dim));
  const std::vector<float> a = random_floats(rng_, static_cast<size_t>(rows * dim));
  const std::vector<float> w = random_floats(rng_, dim);
  ops_->prepare(w);
  float* dx = put(x);
  ops_->sigmoid_dot_scale(dx, put(a), w, rows, dim);
  const std::vector<float> got = get(dx, x.size());
  for (int r = 0; r < rows; ++r) {
    double d = 0.0, abs = 0.0;
    for (int i = 0; i < dim; ++i) {
      d += double{w[static_cast<size_t>(i)]} * a[static_cast<size_t>(r * dim + i)];
      abs += std::fabs(double{w[static_cast<size_t>(i)]} * a[static_cast<size_t>(r * dim + i)]);
    }
    const double s = sigmoid(d);
    for (int i = 0; i < dim; ++i) {
      const double xi = x[static_cast<size_t>(r * dim + i)];
      // sigmoid' <= 1/4 times the dot product's error, and the roundings of the scale.
      const double tol = std::fabs(xi) * (0.25 * 2.0 * (dim + 2) * kU * abs + 32.0 * kU * s);
      ASSERT_NEAR(got[static_cast<size_t>(r * dim + i)], xi * s, tol + 1e-30) << r << " " << i;
    }
  }
}

TEST_P(BackendOps, CopyStridedBroadcastAndZero) {
  const CopySpec c{.outer = 3,
                   .rows = 4,
                   .cols = 5,
                   .src_outer = 7,
                   .src_row = 0,
                   .dst_outer = 50,
                   .dst_row = 9};
  const std::vector<float> src = random_floats(rng_, 30);
  std::vector<float> dst(160, 42.0f);
  float* d = put(dst);
  ops_->copy(put(src), d, c);
  std::vector<float> want = dst;
  for (int o = 0; o < c.outer; ++o)
    for (int r = 0; r < c.rows; ++r)
      for (int k = 0; k < c.cols; ++k)
        want[static_cast<size_t>(o * c.dst_outer + r * c.dst_row + k)] =
            src[static_cast<size_t>(o * c.src_outer + r * c.src_row + k)];
  EXPECT_EQ(get(d, dst.size()), want);
  ops_->zero(d + 3, 100);
  std::fill_n(want.begin() + 3, 100, 0.0f);
  EXPECT_EQ(get(d, dst.size()), want);
}

// Routed experts of one token as the op defines them, in double; tol gets the bound.
double moe_ref(const std::vector<std::array<HostMatrix, 3>>& ex,
               const std::vector<ExpertCall>& calls, const float* x, size_t row, double* tol) {
  double out = 0.0;
  *tol = 1e-30;
  for (const ExpertCall& c : calls) {
    const auto& [gate, up, down] = ex[static_cast<size_t>(c.expert)];
    std::vector<float> h(static_cast<size_t>(kFfn));
    double dot = 0.0, abs = 0.0;
    for (size_t j = 0; j < h.size(); ++j) {
      const double g = gate.dot(j, x), u = up.dot(j, x);
      const double hj = silu(g) * u;
      h[j] = static_cast<float>(hj);
      // silu' <= 1.1; the products' errors; the rounding of h.
      const double dh = 1.1 * gate.tolerance(j, x) * std::fabs(u) +
                        std::fabs(silu(g)) * up.tolerance(j, x) + 32.0 * kU * std::fabs(hj);
      dot += double{down.values[row * static_cast<size_t>(kFfn) + j]} * hj;
      abs += std::fabs(double{down.values[row * static_cast<size_t>(kFfn) + j]}) * dh;
    }
    out += c.weight * dot;
    *tol += std::fabs(c.weight) * (abs + down.tolerance(row, h.data()) * 1.01) +
            4.0 * kU * std::fabs(out);
  }
  return out;
}

TEST_P(BackendOps, MoeOverExpertReferencesDecodeAndGrouped) {
  int ran = 0;
  for (const DType t : {DType::kF32, DType::kBF16, DType::kQ8_0}) {
    SCOPED_TRACE(std::string(kernels::dtype_name(t)));
    std::vector<std::array<HostMatrix, 3>> ex;
    std::vector<model::SwigluWeights> sw;
    for (int e = 0; e < kExperts; ++e)
      ex.push_back({HostMatrix(rng_, t, kFfn, kHidden), HostMatrix(rng_, t, kFfn, kHidden),
                    HostMatrix(rng_, t, kHidden, kFfn)});
    bool ok = true;
    for (const auto& [g, u, d] : ex) {
      sw.push_back({.gate = g.m, .up = u.m, .down = d.m});
      ok = ok && prepare(g.m) && prepare(u.m) && prepare(d.m);
    }
    if (!ok) continue;
    for (const int n : {1, 4}) {
      const int K = n == 1 ? kTopK : 2;
      std::vector<ExpertCall> calls;
      for (int tok = 0; tok < n; ++tok) {
        std::vector<int> ids = {0, 1, 2, 3, 4, 5, 6, 7};
        std::shuffle(ids.begin(), ids.end(), rng_);
        std::sort(ids.begin(), ids.begin() + K);  // each token's calls in ascending expert order
        for (int i = 0; i < K; ++i)
          calls.push_back({.weights = &sw[static_cast<size_t>(ids[static_cast<size_t>(i)])],
                           .expert = ids[static_cast<size_t>(i)],
                           .weight = 0.2f + 0.3f * static_cast<float>(i)});
      }
      const std::vector<float> x = random_floats(rng_, static_cast<size_t>(n * kHidden));
      float* dout = ops_->alloc(static_cast<size_t>(n * kHidden));
      const float* dx = put(x);
      ops_->moe(0, dx, n, calls, dout);
      const std::vector<float> out = get(dout, static_cast<size_t>(n * kHidden));
      if (n == 1) {
        // In parts (schedule::MoeWait::kReady), not in the order of the calls, each call's
        // weights stale (another expert's) until its part: the bits of moe().
        std::vector<ExpertCall> parted(calls);
        for (ExpertCall& c : parted)
          c.weights = &sw[static_cast<size_t>((c.expert + 1) % kExperts)];
        float* pout = ops_->alloc(static_cast<size_t>(kHidden));
        auto part = [&](std::vector<int32_t> picks, bool last) {
          for (const int32_t i : picks)
            parted[static_cast<size_t>(i)] = calls[static_cast<size_t>(i)];
          ops_->moe_part(0, dx, parted, picks, last, pout);
        };
        part({2}, false);
        part({0}, false);
        part({1}, true);
        EXPECT_EQ(get(pout, static_cast<size_t>(kHidden)), out);
      }
      for (int tok = 0; tok < n; ++tok) {
        const std::vector<ExpertCall> mine(calls.begin() + tok * K, calls.begin() + (tok + 1) * K);
        for (size_t r = 0; r < static_cast<size_t>(kHidden); ++r) {
          double tol = 0.0;
          const double ref = moe_ref(ex, mine, &x[static_cast<size_t>(tok * kHidden)], r, &tol);
          ASSERT_NEAR(out[static_cast<size_t>(tok * kHidden) + r], ref, tol)
              << "n " << n << " token " << tok << " row " << r;
        }
      }
      ++ran;
    }
  }
  EXPECT_GE(ran, 4);  // F32 and BF16 run everywhere
}

// Gated DeltaNet over tokens, in double, from the formulas of kernels/linear_attention.hpp.
struct DeltaRef {
  DeltaRuleSpec s;
  std::vector<double> conv, S;
  int conv_dim() const { return 2 * s.k_heads * s.dk + s.v_heads * s.dv; }
  void token(const DeltaRuleWeights& w, std::vector<double> x, const float* z, const float* b,
             const float* a, double* core) {
    const int cd = conv_dim(), m = s.conv_kernel - 1, kd = s.k_heads * s.dk;
    for (int c = 0; c < cd; ++c) {
      double acc = 0.0;
      for (int j = 0; j < m; ++j)
        acc += w.conv[static_cast<size_t>(c * s.conv_kernel + j)] *
               conv[static_cast<size_t>(c * m + j)];
      acc += w.conv[static_cast<size_t>(c * s.conv_kernel + m)] * x[static_cast<size_t>(c)];
      for (int j = 0; j + 1 < m; ++j)
        conv[static_cast<size_t>(c * m + j)] = conv[static_cast<size_t>(c * m + j + 1)];
      if (m > 0) conv[static_cast<size_t>(c * m + m - 1)] = x[static_cast<size_t>(c)];
      x[static_cast<size_t>(c)] = silu(acc);
    }
    for (int h = 0; h < 2 * s.k_heads; ++h) {  // q heads then k heads
      double ss = 0.0;
      for (int i = 0; i < s.dk; ++i)
        ss += x[static_cast<size_t>(h * s.dk + i)] * x[static_cast<size_t>(h * s.dk + i)];
      const double scale =
          1.0 / std::sqrt(ss + 1e-6) / (h < s.k_heads ? std::sqrt(double{1.0} * s.dk) : 1.0);
      for (int i = 0; i < s.dk; ++i) x[static_cast<size_t>(h * s.dk + i)] *= scale;
    }
    for (int h = 0; h < s.v_heads; ++h) {
      const int kh = s.v_heads_tiled ? h % s.k_heads : h / (s.v_heads / s.k_heads);
      const double* q = &x[static_cast<size_t>(kh * s.dk)];
      const double* k = &x[static_cast<size_t>(kd + kh * s.dk)];
      const double* v = &x[static_cast<size_t>(2 * kd + h * s.dv)];
      const double beta = sigmoid(b[h]);
      const double pre = double{a[h]} + w.dt_bias[static_cast<size_t>(h)];
      const double g =
          w.a_neg[static_cast<size_t>(h)] * (pre > 20.0 ? pre : std::log1p(std::exp(pre)));
      double* St = &S[static_cast<size_t>(h * s.dk * s.dv)];
      double* o = core + h * s.dv;
      double ss = 0.0;
      for (int j = 0; j < s.dv; ++j) {
        double mj = 0.0;
        for (int i = 0; i < s.dk; ++i) mj += (St[i * s.dv + j] *= std::exp(g)) * k[i];
        const double d = (v[j] - mj) * beta;
        o[j] = 0.0;
        for (int i = 0; i < s.dk; ++i) o[j] += (St[i * s.dv + j] += k[i] * d) * q[i];
        ss += o[j] * o[j];
      }
      const double inv = 1.0 / std::sqrt(ss / s.dv + s.eps);
      for (int j = 0; j < s.dv; ++j)
        o[j] = w.norm[static_cast<size_t>(j)] * o[j] * inv * silu(z[h * s.dv + j]);
    }
  }
};

TEST_P(BackendOps, DeltaRuleCarriesItsStateAcrossCalls) {
  for (const bool tiled : {false, true}) {
    SCOPED_TRACE(tiled ? "tiled value heads" : "grouped value heads");
    const DeltaRuleSpec s{.k_heads = 2,
                          .v_heads = 4,
                          .dk = 8,
                          .dv = 8,
                          .conv_kernel = 4,
                          .v_heads_tiled = tiled,
                          .eps = 1e-6f};
    DeltaRef ref{.s = s};
    const int cd = ref.conv_dim(), vd = s.v_heads * s.dv, nv = s.v_heads;
    ref.conv.assign(static_cast<size_t>(cd * (s.conv_kernel - 1)), 0.0);
    ref.S.assign(static_cast<size_t>(nv * s.dk * s.dv), 0.0);
    const std::vector<float> conv = random_floats(rng_, static_cast<size_t>(cd * s.conv_kernel));
    const std::vector<float> a_neg = random_floats(rng_, static_cast<size_t>(nv), -2.0f, -0.1f);
    const std::vector<float> dt_bias = random_floats(rng_, static_cast<size_t>(nv));
    const std::vector<float> norm = random_floats(rng_, static_cast<size_t>(s.dv), 0.5f, 1.5f);
    for (const auto* v : {&conv, &a_neg, &dt_bias, &norm}) ops_->prepare(*v);
    const DeltaRuleWeights w{.conv = conv, .a_neg = a_neg, .dt_bias = dt_bias, .norm = norm};
    const DeltaRuleState st{.conv = ops_->alloc(ref.conv.size()),
                            .recurrent = ops_->alloc(ref.S.size())};
    int done = 0;
    for (const int n : {3, 1, 2}) {  // a prefill, then decoding: the state carries over
      const std::vector<float> qkv = random_floats(rng_, static_cast<size_t>(n * cd), -2.0f, 2.0f);
      const std::vector<float> z = random_floats(rng_, static_cast<size_t>(n * vd));
      const std::vector<float> b = random_floats(rng_, static_cast<size_t>(n * nv), -2.0f, 2.0f);
      const std::vector<float> a = random_floats(rng_, static_cast<size_t>(n * nv), -2.0f, 2.0f);
      float* dcore = ops_->alloc(static_cast<size_t>(n * vd));
      ops_->delta_rule(s, w, st, put(qkv), put(z), put(b), put(a), n, dcore);
      const std::vector<float> core = get(dcore, static_cast<size_t>(n * vd));
      for (int t = 0; t < n; ++t) {
        std::vector<double> want(static_cast<size_t>(vd));
        ref.token(w, std::vector<double>(qkv.begin() + t * cd, qkv.begin() + (t + 1) * cd),
                  &z[static_cast<size_t>(t * vd)], &b[static_cast<size_t>(t * nv)],
                  &a[static_cast<size_t>(t * nv)], want.data());
        ++done;
        // Each token's chain: conv (K terms), two normalisations over dk, the state sums over dk,
        // the gated norm over dv; errors carried by the state grow with the tokens seen.
        const double rel = 8.0 * (s.conv_kernel + 2 * s.dk + s.dv + 8) * done * kU;
        for (int j = 0; j < vd; ++j)
          ASSERT_NEAR(core[static_cast<size_t>(t * vd + j)], want[static_cast<size_t>(j)],
                      rel * (1.0 + std::fabs(want[static_cast<size_t>(j)])))
              << "token " << done << " value " << j;
      }
    }
  }
}

// The CPU splits a layer's value heads over its threads; each head is computed whole by one of
// them, so outputs and state are bit-identical at every thread count.
TEST(CpuOpsThreads, DeltaRuleIsBitIdenticalAtEveryThreadCount) {
  std::mt19937 rng(7);
  const DeltaRuleSpec s{
      .k_heads = 2, .v_heads = 6, .dk = 16, .dv = 8, .conv_kernel = 4, .eps = 1e-6f};
  const int cd = 2 * s.k_heads * s.dk + s.v_heads * s.dv, vd = s.v_heads * s.dv, n = 3;
  const std::vector<float> conv = random_floats(rng, static_cast<size_t>(cd * s.conv_kernel));
  const std::vector<float> a_neg = random_floats(rng, static_cast<size_t>(s.v_heads), -2.0f, -0.1f);
  const std::vector<float> dt_bias = random_floats(rng, static_cast<size_t>(s.v_heads));
  const std::vector<float> norm = random_floats(rng, static_cast<size_t>(s.dv), 0.5f, 1.5f);
  const std::vector<float> qkv = random_floats(rng, static_cast<size_t>(n * cd), -2.0f, 2.0f);
  const std::vector<float> z = random_floats(rng, static_cast<size_t>(n * vd));
  const std::vector<float> b = random_floats(rng, static_cast<size_t>(n * s.v_heads), -2.0f, 2.0f);
  const std::vector<float> a = random_floats(rng, static_cast<size_t>(n * s.v_heads), -2.0f, 2.0f);
  std::vector<float> first;
  for (const int threads : {1, 2, 3, 4}) {
    CpuOps ops(CpuOpsParams{.threads = threads,
                            .max_batch = kBatch,
                            .hidden = kHidden,
                            .expert_ffn = kFfn,
                            .experts = kExperts,
                            .top_k = kTopK});
    const DeltaRuleWeights w{.conv = conv, .a_neg = a_neg, .dt_bias = dt_bias, .norm = norm};
    const size_t state_floats = static_cast<size_t>(cd * (s.conv_kernel - 1)) +
                                static_cast<size_t>(s.v_heads * s.dk * s.dv);
    float* state = ops.alloc(state_floats);
    std::fill(state, state + state_floats, 0.0f);
    const DeltaRuleState st{.conv = state, .recurrent = state + cd * (s.conv_kernel - 1)};
    std::vector<float> in(qkv);  // delta_rule convolves in place
    std::vector<float> core(static_cast<size_t>(n * vd));
    ops.delta_rule(s, w, st, in.data(), z.data(), b.data(), a.data(), n, core.data());
    core.insert(core.end(), state, state + state_floats);  // the state carried on, too
    if (first.empty()) {
      first = core;
      continue;
    }
    ASSERT_EQ(core.size(), first.size());
    for (size_t i = 0; i < core.size(); ++i)
      ASSERT_EQ(std::bit_cast<uint32_t>(core[i]), std::bit_cast<uint32_t>(first[i]))
          << threads << " threads, value " << i;
  }
}

// ---- The chunked Gated DeltaNet prefill (DeltaRulePrefill::kChunked) ---------------------------

// One Gated DeltaNet layer's delta-rule op on the CPU over a prompt of n tokens fed as calls of
// `calls` tokens each, then `decode` single-token calls: every call's output, then the conv and
// recurrent state, in one vector. Value heads 6 over key heads 2; dk 32 != dv 24.
struct DeltaRuleRun {
  DeltaRuleSpec s{.k_heads = 2, .v_heads = 6, .dk = 32, .dv = 24, .conv_kernel = 4, .eps = 1e-6f};
  int cd = 2 * s.k_heads * s.dk + s.v_heads * s.dv;
  int vd = s.v_heads * s.dv;
  std::vector<float> conv, a_neg, dt_bias, norm, qkv, z, b, a;

  explicit DeltaRuleRun(int tokens) {
    std::mt19937 rng(21);
    const auto n = static_cast<size_t>(tokens);
    const auto nv = static_cast<size_t>(s.v_heads);
    conv = random_floats(rng, static_cast<size_t>(cd * s.conv_kernel));
    a_neg = random_floats(rng, nv, -2.0f, -0.1f);
    dt_bias = random_floats(rng, nv);
    norm = random_floats(rng, static_cast<size_t>(s.dv), 0.5f, 1.5f);
    qkv = random_floats(rng, n * static_cast<size_t>(cd), -2.0f, 2.0f);
    z = random_floats(rng, n * static_cast<size_t>(vd));
    b = random_floats(rng, n * nv, -2.0f, 2.0f);
    a = random_floats(rng, n * nv, -3.0f, 3.0f);
  }

  std::vector<float> run(int threads, DeltaRulePrefill prefill, int prompt, int calls,
                         int decode) const {
    CpuOps ops(CpuOpsParams{.threads = threads,
                            .max_batch = kBatch,
                            .hidden = kHidden,
                            .expert_ffn = kFfn,
                            .experts = kExperts,
                            .top_k = kTopK,
                            .gdn_prefill = prefill});
    const DeltaRuleWeights w{.conv = conv, .a_neg = a_neg, .dt_bias = dt_bias, .norm = norm};
    const size_t conv_floats = static_cast<size_t>(cd * (s.conv_kernel - 1));
    const size_t state_floats = conv_floats + static_cast<size_t>(s.v_heads * s.dk * s.dv);
    float* state = ops.alloc(state_floats);
    std::fill(state, state + state_floats, 0.0f);
    const DeltaRuleState st{.conv = state, .recurrent = state + conv_floats};
    std::vector<float> in(qkv);  // delta_rule convolves in place
    std::vector<float> core(qkv.size() / static_cast<size_t>(cd) * static_cast<size_t>(vd));
    int t = 0;
    auto call = [&](int n) {
      const auto t0 = static_cast<size_t>(t);
      ops.delta_rule(s, w, st, &in[t0 * static_cast<size_t>(cd)], &z[t0 * static_cast<size_t>(vd)],
                     &b[t0 * static_cast<size_t>(s.v_heads)],
                     &a[t0 * static_cast<size_t>(s.v_heads)], n,
                     &core[t0 * static_cast<size_t>(vd)]);
      t += n;
    };
    while (t < prompt) call(std::min(calls, prompt - t));
    for (int i = 0; i < decode; ++i) call(1);
    core.resize(static_cast<size_t>(t * vd));
    core.insert(core.end(), state, state + state_floats);
    return core;
  }
};

// With the chunked prefill, each value head's n tokens go through one chunked call split over the
// threads by head: outputs and state are bit-identical at every thread count.
TEST(CpuOpsThreads, ChunkedDeltaRuleIsBitIdenticalAtEveryThreadCount) {
  const int n = 2 * kDeltaRuleChunk + 7;  // two whole chunks and a partial one
  const DeltaRuleRun r(n);
  const std::vector<float> first = r.run(1, DeltaRulePrefill::kChunked, n, n, 0);
  for (const int threads : {2, 3, 4, 7}) {
    const std::vector<float> got = r.run(threads, DeltaRulePrefill::kChunked, n, n, 0);
    ASSERT_EQ(got.size(), first.size());
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(first[i]))
          << threads << " threads, value " << i;
  }
}

// The chunked prefill's outputs (after the gated RMSNorm) and the state it leaves are within a
// tolerance of the token-by-token op; the conv state is the same bits (both run the conv token by
// token); decoding after it continues from its state. The recurrent prefill equals token-by-token
// decoding bit for bit, and the chunked one differs from it (so the option is in effect).
TEST(CpuOps, ChunkedDeltaRulePrefillMatchesTheRecurrence) {
  const int prompt = 2 * kDeltaRuleChunk + 9, decode = 4;
  const DeltaRuleRun r(prompt + decode);
  const std::vector<float> tokenwise = r.run(1, DeltaRulePrefill::kRecurrent, prompt, 1, decode);
  EXPECT_EQ(r.run(2, DeltaRulePrefill::kRecurrent, prompt, prompt, decode), tokenwise);
  // Whole prompt in one call, and in calls of 40 (chunks restart at each call's first token).
  for (const int calls : {prompt, 40}) {
    SCOPED_TRACE(::testing::Message() << "prefill calls of " << calls << " tokens");
    const std::vector<float> got = r.run(2, DeltaRulePrefill::kChunked, prompt, calls, decode);
    ASSERT_EQ(got.size(), tokenwise.size());
    EXPECT_NE(got, tokenwise);
    // The kernels' bound (tests/kernels/test_delta_rule_chunked.cpp: 1e-5 relative to 1 +
    // |value| on the delta rule), and the gated RMSNorm divides by the output's RMS, which can
    // scale a small error up: 1e-4. Measured ~1e-6.
    const size_t outputs = static_cast<size_t>((prompt + decode) * r.vd);
    const size_t conv_end = outputs + static_cast<size_t>(r.cd * (r.s.conv_kernel - 1));
    double worst = 0.0;
    for (size_t i = 0; i < got.size(); ++i) {
      if (i >= outputs && i < conv_end) {
        ASSERT_EQ(got[i], tokenwise[i]) << "conv state " << i - outputs;
        continue;
      }
      const double e = std::fabs(static_cast<double>(got[i]) - tokenwise[i]) /
                       (1.0 + std::fabs(static_cast<double>(tokenwise[i])));
      worst = std::max(worst, e);
      ASSERT_LE(e, 1e-4) << (i < outputs ? "output " : "recurrent state ")
                         << (i < outputs ? i : i - conv_end);
    }
    std::printf("[ chunked ] CpuOps chunked vs token by token: max rel %.2g\n", worst);
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, BackendOps, ::testing::ValuesIn(backends()),
                         [](const ::testing::TestParamInfo<Backend>& i) { return i.param.name; });

}  // namespace
}  // namespace steermoe::engine
