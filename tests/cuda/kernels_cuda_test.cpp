// Every CUDA kernel against the CPU scalar reference (kernels::, Isa kScalar) over sizes,
// misaligned pointers and strides, and random data. Tolerances come from the inputs: a dot
// product of n terms is within gamma_n * sum |a_i b_i| of the exact value on either side, so the
// two results are within twice that (cuda_test_util.hpp); other kernels propagate such bounds.
#include "kernels/cuda/kernels_cuda.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "cuda_test_util.hpp"
#include "kernels/cuda/forward_cuda.hpp"
#include "kernels/kernels.hpp"

namespace steermoe::cudatest {
namespace {

namespace kc = kernels::cuda;
using kernels::DType;

class ScalarReference : public ::testing::Test {
 protected:
  void SetUp() override {
    SM_REQUIRE_GPU();
    kernels::set_active_isa(kernels::Isa::kScalar);
  }
  void TearDown() override { kernels::set_active_isa(kernels::best_isa()); }
  kernels::ThreadPool pool_{1};
  std::mt19937 rng_{12345};
};

// Weights of `dtype` with rows `stride` elements apart, as raw bytes, plus their f32 values.
struct HostMatrix {
  std::vector<uint8_t> bytes;
  std::vector<float> values;  // [rows][stride] as f32
};

HostMatrix make_matrix(std::mt19937& rng, DType dtype, size_t rows, size_t stride) {
  HostMatrix m;
  const std::vector<float> v = random_floats(rng, rows * stride);
  const size_t es = kernels::dtype_size(dtype);
  m.bytes.resize(v.size() * es);
  m.values.resize(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    if (dtype == DType::kF32) {
      std::memcpy(&m.bytes[i * 4], &v[i], 4);
      m.values[i] = v[i];
    } else {
      const uint16_t b =
          dtype == DType::kBF16 ? kernels::f32_to_bf16(v[i]) : kernels::f32_to_f16(v[i]);
      std::memcpy(&m.bytes[i * 2], &b, 2);
      m.values[i] = dtype == DType::kBF16 ? kernels::bf16_to_f32(b) : kernels::f16_to_f32(b);
    }
  }
  return m;
}

kc::WType wtype(DType d) {
  return static_cast<kc::WType>(static_cast<int>(d));
}

TEST_F(ScalarReference, MatmulEveryDtypeSizeAndAlignment) {
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (size_t rows : {1u, 7u, 33u, 257u}) {
      for (size_t cols : {1u, 5u, 64u, 1000u}) {
        for (size_t pad : {0u, 3u}) {      // row stride = cols + pad
          for (size_t shift : {0u, 1u}) {  // misaligned weight and x pointers
            const size_t stride = cols + pad;
            const int n = rows == 33 ? 3 : 1;
            const HostMatrix w = make_matrix(rng_, dtype, rows, stride);
            const size_t es = kernels::dtype_size(dtype);
            DeviceBuffer dw(w.bytes.size() + 16);
            dw.upload(w.bytes.data(), w.bytes.size(), shift * es);
            const size_t xs = cols + shift;  // x rows of n tokens, xs floats apart
            const std::vector<float> x = random_floats(rng_, static_cast<size_t>(n) * xs + shift);
            DeviceBuffer dx(x.size() * 4);
            dx.upload(x.data(), x.size() * 4);
            DeviceBuffer dy(static_cast<size_t>(n) * rows * 4);
            const kc::DMatrix dm{.data = static_cast<uint8_t*>(dw.get()) + shift * es,
                                 .dtype = wtype(dtype),
                                 .rows = static_cast<int32_t>(rows),
                                 .cols = static_cast<int32_t>(cols),
                                 .stride = static_cast<int64_t>(stride)};
            ASSERT_EQ(kc::matmul(dm, dx.as<float>(shift), static_cast<int64_t>(xs), dy.as<float>(),
                                 0, n, 1.0f, false, nullptr),
                      0);
            sync();
            std::vector<float> got(static_cast<size_t>(n) * rows);
            dy.download(got.data(), got.size() * 4);
            const kernels::Matrix hm{.data = w.bytes.data(),
                                     .dtype = dtype,
                                     .rows = rows,
                                     .cols = cols,
                                     .row_stride = stride};
            for (int t = 0; t < n; ++t) {
              std::vector<float> want(rows);
              const float* xt = &x[shift + static_cast<size_t>(t) * xs];
              kernels::matvec(pool_, hm, xt, want.data());
              for (size_t r = 0; r < rows; ++r) {
                double abs_sum = 0;
                for (size_t c = 0; c < cols; ++c)
                  abs_sum += std::fabs(static_cast<double>(w.values[r * stride + c]) * xt[c]);
                ASSERT_NEAR(got[static_cast<size_t>(t) * rows + r], want[r],
                            2 * dot_bound(cols, abs_sum))
                    << kernels::dtype_name(dtype) << " rows " << rows << " cols " << cols << " pad "
                    << pad << " shift " << shift << " token " << t << " row " << r;
              }
            }
          }
        }
      }
    }
  }
}

TEST_F(ScalarReference, MatmulAccumulatesAndScales) {
  const size_t rows = 19, cols = 70;
  const HostMatrix w = make_matrix(rng_, DType::kBF16, rows, cols);
  DeviceBuffer dw(w.bytes.size());
  dw.upload(w.bytes.data(), w.bytes.size());
  const std::vector<float> x = random_floats(rng_, cols);
  std::vector<float> y0 = random_floats(rng_, rows);
  DeviceBuffer dx(cols * 4), dy(rows * 4);
  dx.upload(x.data(), cols * 4);
  dy.upload(y0.data(), rows * 4);
  const kc::DMatrix dm{.data = dw.get(), .dtype = kc::WType::kBF16, .rows = 19, .cols = 70};
  ASSERT_EQ(kc::matmul(dm, dx.as<float>(), 0, dy.as<float>(), 0, 1, 0.5f, true, nullptr), 0);
  sync();
  std::vector<float> got(rows), want = y0;
  dy.download(got.data(), rows * 4);
  const kernels::Matrix hm{
      .data = w.bytes.data(), .dtype = DType::kBF16, .rows = rows, .cols = cols};
  kernels::matvec(pool_, hm, x.data(), want.data(), {.scale = 0.5f, .accumulate = true});
  for (size_t r = 0; r < rows; ++r) {
    double abs_sum = std::fabs(y0[r]);
    for (size_t c = 0; c < cols; ++c) abs_sum += std::fabs(w.values[r * cols + c] * x[c]);
    ASSERT_NEAR(got[r], want[r], 2 * dot_bound(cols + 1, abs_sum)) << r;
  }
}

TEST_F(ScalarReference, RmsnormRowsWithStrides) {
  for (int dim : {1, 16, 255, 2048}) {
    for (int in_pad : {0, 5}) {
      const int rows = 3;
      const int is = dim + in_pad;
      const std::vector<float> x = random_floats(rng_, static_cast<size_t>(rows * is), -3, 3);
      const std::vector<float> w = random_floats(rng_, static_cast<size_t>(dim), 0.5f, 1.5f);
      DeviceBuffer dx(x.size() * 4), dw(w.size() * 4), dout(static_cast<size_t>(rows * dim) * 4);
      dx.upload(x.data(), x.size() * 4);
      dw.upload(w.data(), w.size() * 4);
      ASSERT_EQ(kc::rmsnorm_rows(dx.as<float>(), is, dw.as<float>(), dout.as<float>(), 0, rows, dim,
                                 1e-5f, nullptr),
                0);
      sync();
      std::vector<float> got(static_cast<size_t>(rows * dim));
      dout.download(got.data(), got.size() * 4);
      for (int r = 0; r < rows; ++r) {
        std::vector<float> want(static_cast<size_t>(dim));
        kernels::rmsnorm(&x[static_cast<size_t>(r * is)], w.data(), want.data(),
                         static_cast<size_t>(dim), {.eps = 1e-5f});
        for (int i = 0; i < dim; ++i) {
          const float v = want[static_cast<size_t>(i)];
          // the mean of squares carries gamma_dim, rsqrt a few ulps, then two products
          const double tol = 2 * (static_cast<double>(dim) + 8) * kU * std::fabs(v) + 1e-30;
          ASSERT_NEAR(got[static_cast<size_t>(r * dim + i)], v, tol) << dim << " " << r << " " << i;
        }
      }
    }
  }
}

TEST_F(ScalarReference, RopeNeoxAndInterleavedWithOffsets) {
  for (bool interleaved : {false, true}) {
    for (int pos0 : {0, 7, 1000}) {
      const int heads = 3, head_stride = 40, rot_offset = 8, rot = 32, n = 2;
      const int ts = heads * head_stride + 4;
      const float theta = 10000.0f;
      const std::vector<float> x = random_floats(rng_, static_cast<size_t>(n * ts));
      DeviceBuffer dx(x.size() * 4);
      dx.upload(x.data(), x.size() * 4);
      ASSERT_EQ(kc::rope(dx.as<float>(), n, ts, heads, head_stride, rot_offset, rot, pos0, theta,
                         interleaved, nullptr),
                0);
      sync();
      std::vector<float> got(x.size());
      dx.download(got.data(), got.size() * 4);
      std::vector<float> want = x;
      const kernels::RopeParams p{
          .style = interleaved ? kernels::RopeStyle::kInterleaved : kernels::RopeStyle::kNeox,
          .head_dim = static_cast<size_t>(head_stride),
          .rot_offset = static_cast<size_t>(rot_offset),
          .rot_dim = static_cast<size_t>(rot),
          .theta = theta};
      for (int t = 0; t < n; ++t)
        kernels::rope(&want[static_cast<size_t>(t * ts)], heads, static_cast<size_t>(pos0 + t), p);
      // angle = pos * theta^(-2i/rot): relative error a few ulps, so an absolute angle error of
      // about (pos + 1) * 8u; each output moves by at most that times |x0| + |x1|.
      const double angle_err = (pos0 + n + 1) * 8 * kU;
      for (size_t i = 0; i < x.size(); ++i) {
        const double tol = (angle_err + 8 * kU) * 2.0 + 1e-30;
        ASSERT_NEAR(got[i], want[i], tol) << interleaved << " pos " << pos0 << " i " << i;
      }
    }
  }
}

// Attention of n queries (prefill) against the CPU's one-query attention, GQA and MLA-like
// shapes (dk != dv, padded q heads).
TEST_F(ScalarReference, AttentionPrefillAndDecodeShapes) {
  struct Shape {
    int heads, kv_heads, dk, dv, q_stride;
  };
  for (const Shape s :
       {Shape{8, 2, 16, 16, 16}, Shape{4, 4, 24, 16, 24}, Shape{2, 1, 64, 64, 64}}) {
    for (int pos0 : {0, 5, 300}) {
      const int n = 3, max_pos = 400;
      const float scale = 1.0f / std::sqrt(static_cast<float>(s.dk));
      const size_t kr = static_cast<size_t>(s.kv_heads * s.dk),
                   vr = static_cast<size_t>(s.kv_heads * s.dv);
      const std::vector<float> k = random_floats(rng_, static_cast<size_t>(max_pos) * kr);
      const std::vector<float> v = random_floats(rng_, static_cast<size_t>(max_pos) * vr);
      const size_t qn = static_cast<size_t>(n * s.heads * s.q_stride);
      const std::vector<float> q = random_floats(rng_, qn, -2, 2);
      DeviceBuffer dk(k.size() * 4), dv(v.size() * 4), dq(qn * 4);
      DeviceBuffer dout(static_cast<size_t>(n * s.heads * s.dv) * 4);
      DeviceBuffer scratch(static_cast<size_t>(n * s.heads * max_pos) * 4);
      dk.upload(k.data(), k.size() * 4);
      dv.upload(v.data(), v.size() * 4);
      dq.upload(q.data(), qn * 4);
      const kc::AttentionShape sh{.heads = s.heads,
                                  .kv_heads = s.kv_heads,
                                  .dk = s.dk,
                                  .dv = s.dv,
                                  .q_head_stride = s.q_stride,
                                  .scale = scale};
      ASSERT_EQ(kc::attention(dq.as<float>(), dk.as<float>(), dv.as<float>(), dout.as<float>(),
                              scratch.as<float>(), max_pos, n, pos0, sh, nullptr),
                0);
      sync();
      std::vector<float> got(static_cast<size_t>(n * s.heads * s.dv));
      dout.download(got.data(), got.size() * 4);
      const kernels::AttentionParams ap{.n_heads = static_cast<size_t>(s.heads),
                                        .n_kv_heads = static_cast<size_t>(s.kv_heads),
                                        .head_dim_k = static_cast<size_t>(s.dk),
                                        .head_dim_v = static_cast<size_t>(s.dv),
                                        .scale = scale,
                                        .q_head_stride = static_cast<size_t>(s.q_stride)};
      for (int t = 0; t < n; ++t) {
        const int n_pos = pos0 + t + 1;
        std::vector<float> want(static_cast<size_t>(s.heads * s.dv));
        kernels::attention(pool_, &q[static_cast<size_t>(t * s.heads * s.q_stride)], k.data(),
                           v.data(), static_cast<size_t>(n_pos), want.data(), ap);
        // scores: |q||k| scale bounds each logit's dot error; exp turns an absolute logit error
        // e into a relative weight error ~e; outputs are convex combinations of v (|v| <= 1).
        double qk_max = 0;
        for (int h = 0; h < s.heads; ++h) {
          double qa = 0;
          for (int i = 0; i < s.dk; ++i)
            qa += std::fabs(q[static_cast<size_t>((t * s.heads + h) * s.q_stride + i)]);
          qk_max = std::max(qk_max, qa * scale);
        }
        const double logit_err = 2 * dot_bound(static_cast<size_t>(s.dk), qk_max);
        const double tol = 4 * (logit_err + 2 * (n_pos + s.dk + 8) * kU);
        for (size_t i = 0; i < want.size(); ++i)
          ASSERT_NEAR(got[static_cast<size_t>(t * s.heads * s.dv) + i], want[i], tol)
              << "heads " << s.heads << " pos0 " << pos0 << " t " << t << " i " << i;
      }
    }
  }
}

TEST_F(ScalarReference, SwigluAndAdd) {
  for (int64_t n : {1, 255, 4097}) {
    const auto nn = static_cast<size_t>(n);
    const std::vector<float> g = random_floats(rng_, nn, -6, 6), u = random_floats(rng_, nn);
    DeviceBuffer dg(nn * 4), du(nn * 4), dout(nn * 4);
    dg.upload(g.data(), nn * 4);
    du.upload(u.data(), nn * 4);
    ASSERT_EQ(kc::swiglu(dg.as<float>(), du.as<float>(), dout.as<float>(), n, nullptr), 0);
    sync();
    std::vector<float> got(nn), want(nn);
    dout.download(got.data(), nn * 4);
    kernels::swiglu(g.data(), u.data(), want.data(), nn);
    for (size_t i = 0; i < nn; ++i)
      ASSERT_NEAR(got[i], want[i], 16 * kU * (std::fabs(want[i]) + 1e-30)) << i;
    ASSERT_EQ(kc::add(dg.as<float>(), du.as<float>(), dout.as<float>(), n, nullptr), 0);
    sync();
    dout.download(got.data(), nn * 4);
    for (size_t i = 0; i < nn; ++i) ASSERT_EQ(got[i], g[i] + u[i]) << i;  // one rounding each
  }
}

TEST_F(ScalarReference, MlaScatterMatchesTheCpuLayout) {
  const int n = 2, pos0 = 3, heads = 3, nope = 5, rope_dim = 4, dv = 6, max_pos = 8;
  const int rot_stride = 7 + rope_dim;
  const std::vector<float> kvb = random_floats(rng_, static_cast<size_t>(n * heads * (nope + dv)));
  const std::vector<float> rot = random_floats(rng_, static_cast<size_t>(n * rot_stride));
  const size_t qk = static_cast<size_t>(nope + rope_dim);
  DeviceBuffer dkvb(kvb.size() * 4), drot(rot.size() * 4);
  DeviceBuffer dkc(static_cast<size_t>(max_pos * heads) * qk * 4);
  DeviceBuffer dvc(static_cast<size_t>(max_pos * heads * dv) * 4);
  dkvb.upload(kvb.data(), kvb.size() * 4);
  drot.upload(rot.data(), rot.size() * 4);
  ASSERT_EQ(kc::mla_scatter_kv(dkvb.as<float>(), drot.as<float>(), rot_stride, dkc.as<float>(),
                               dvc.as<float>(), n, pos0, heads, nope, rope_dim, dv, nullptr),
            0);
  sync();
  std::vector<float> kcache(static_cast<size_t>(max_pos * heads) * qk);
  std::vector<float> vcache(static_cast<size_t>(max_pos * heads * dv));
  dkc.download(kcache.data(), kcache.size() * 4);
  dvc.download(vcache.data(), vcache.size() * 4);
  for (int t = 0; t < n; ++t) {
    for (int h = 0; h < heads; ++h) {
      const float* src = &kvb[static_cast<size_t>((t * heads + h) * (nope + dv))];
      const float* krow = &kcache[static_cast<size_t>((pos0 + t) * heads + h) * qk];
      const float* vrow = &vcache[static_cast<size_t>(((pos0 + t) * heads + h) * dv)];
      for (int i = 0; i < nope; ++i) ASSERT_EQ(krow[i], src[i]);
      for (int i = 0; i < rope_dim; ++i)
        ASSERT_EQ(krow[nope + i], rot[static_cast<size_t>(t * rot_stride + i)]);
      for (int i = 0; i < dv; ++i) ASSERT_EQ(vrow[i], src[nope + i]);
    }
  }
  for (size_t i = 0; i < static_cast<size_t>(pos0 * heads) * qk; ++i) ASSERT_EQ(kcache[i], 0.0f);
}

// The fused MoE over K experts read through a device pointer array against the CPU's
// composition: gate/up matvec, SwiGLU, down matvec, weighted sum in expert order.
TEST_F(ScalarReference, FusedMoeOverSelectedExperts) {
  for (DType dtype : {DType::kBF16, DType::kF32}) {
    for (int k : {1, 2, 8}) {
      const int hidden = 96, ffn = 40;
      std::vector<HostMatrix> gates, ups, downs;
      std::vector<std::unique_ptr<DeviceBuffer>> bufs;
      std::vector<kc::MoeExpert> ex;
      const std::vector<float> weights = random_floats(rng_, static_cast<size_t>(k), 0.0f, 1.0f);
      for (int e = 0; e < k; ++e) {
        gates.push_back(
            make_matrix(rng_, dtype, static_cast<size_t>(ffn), static_cast<size_t>(hidden)));
        ups.push_back(
            make_matrix(rng_, dtype, static_cast<size_t>(ffn), static_cast<size_t>(hidden)));
        downs.push_back(
            make_matrix(rng_, dtype, static_cast<size_t>(hidden), static_cast<size_t>(ffn)));
        kc::MoeExpert d{.weight = weights[static_cast<size_t>(e)]};
        for (HostMatrix* m : {&gates.back(), &ups.back(), &downs.back()}) {
          bufs.push_back(std::make_unique<DeviceBuffer>(m->bytes.size()));
          bufs.back()->upload(m->bytes.data(), m->bytes.size());
        }
        d.gate = bufs[bufs.size() - 3]->get();
        d.up = bufs[bufs.size() - 2]->get();
        d.down = bufs[bufs.size() - 1]->get();
        ex.push_back(d);
      }
      DeviceBuffer dex(ex.size() * sizeof(kc::MoeExpert));
      dex.upload(ex.data(), ex.size() * sizeof(kc::MoeExpert));
      const std::vector<float> x = random_floats(rng_, static_cast<size_t>(hidden));
      DeviceBuffer dx(x.size() * 4), dh(static_cast<size_t>(k * ffn) * 4), dout(x.size() * 4);
      dx.upload(x.data(), x.size() * 4);
      ASSERT_EQ(kc::moe_fused(dex.as<kc::MoeExpert>(), k, wtype(dtype), hidden, ffn, dx.as<float>(),
                              dh.as<float>(), dout.as<float>(), false, nullptr),
                0);
      sync();
      std::vector<float> got(x.size());
      dout.download(got.data(), got.size() * 4);

      std::vector<float> want(static_cast<size_t>(hidden), 0.0f);
      std::vector<double> tol(static_cast<size_t>(hidden), 1e-30);
      for (int e = 0; e < k; ++e) {
        const auto as_matrix = [&](const HostMatrix& m, int rows, int cols) {
          return kernels::Matrix{.data = m.bytes.data(),
                                 .dtype = dtype,
                                 .rows = static_cast<size_t>(rows),
                                 .cols = static_cast<size_t>(cols)};
        };
        std::vector<float> g(static_cast<size_t>(ffn)), u(static_cast<size_t>(ffn));
        std::vector<float> y(static_cast<size_t>(hidden));
        kernels::matvec(pool_, as_matrix(gates[static_cast<size_t>(e)], ffn, hidden), x.data(),
                        g.data());
        kernels::matvec(pool_, as_matrix(ups[static_cast<size_t>(e)], ffn, hidden), x.data(),
                        u.data());
        std::vector<double> h_err(static_cast<size_t>(ffn));
        for (int i = 0; i < ffn; ++i) {
          double ga = 0, ua = 0;
          for (int c = 0; c < hidden; ++c) {
            ga += std::fabs(
                gates[static_cast<size_t>(e)].values[static_cast<size_t>(i * hidden + c)] *
                x[static_cast<size_t>(c)]);
            ua +=
                std::fabs(ups[static_cast<size_t>(e)].values[static_cast<size_t>(i * hidden + c)] *
                          x[static_cast<size_t>(c)]);
          }
          // silu' <= 1.1 everywhere, |silu(g)| <= |g|
          const double gi = std::fabs(g[static_cast<size_t>(i)]),
                       ui = std::fabs(u[static_cast<size_t>(i)]);
          h_err[static_cast<size_t>(i)] =
              2 * (1.1 * ui * dot_bound(static_cast<size_t>(hidden), ga) +
                   gi * dot_bound(static_cast<size_t>(hidden), ua)) +
              16 * kU * gi * ui;
        }
        kernels::swiglu(g.data(), u.data(), g.data(), static_cast<size_t>(ffn));
        kernels::matvec(pool_, as_matrix(downs[static_cast<size_t>(e)], hidden, ffn), g.data(),
                        y.data());
        const float we = weights[static_cast<size_t>(e)];
        kernels::axpy(we, y.data(), want.data(), static_cast<size_t>(hidden));
        for (int r = 0; r < hidden; ++r) {
          double da = 0, prop = 0;
          for (int i = 0; i < ffn; ++i) {
            const double d =
                std::fabs(downs[static_cast<size_t>(e)].values[static_cast<size_t>(r * ffn + i)]);
            da += d * std::fabs(g[static_cast<size_t>(i)]);
            prop += d * h_err[static_cast<size_t>(i)];
          }
          tol[static_cast<size_t>(r)] += we * (2 * dot_bound(static_cast<size_t>(ffn), da) + prop) +
                                         4 * kU * std::fabs(want[static_cast<size_t>(r)]);
        }
      }
      for (int r = 0; r < hidden; ++r)
        ASSERT_NEAR(got[static_cast<size_t>(r)], want[static_cast<size_t>(r)],
                    tol[static_cast<size_t>(r)])
            << kernels::dtype_name(dtype) << " k " << k << " row " << r;
    }
  }
}

// The three older kernels (kernels_cuda.hpp), bf16 with and without the vector path.
TEST_F(ScalarReference, LegacyBf16MatvecAndGateUp) {
  for (int cols : {64, 70}) {  // 64: 16-byte vector loads; 70: element by element
    const int rows = 24, inter = 12;
    const HostMatrix w =
        make_matrix(rng_, DType::kBF16, static_cast<size_t>(rows), static_cast<size_t>(cols));
    const std::vector<float> x = random_floats(rng_, static_cast<size_t>(cols));
    DeviceBuffer dw(w.bytes.size()), dx(x.size() * 4), dy(static_cast<size_t>(rows) * 4);
    dw.upload(w.bytes.data(), w.bytes.size());
    dx.upload(x.data(), x.size() * 4);
    ASSERT_EQ(kc::matvec_bf16(dw.as<uint16_t>(), dx.as<float>(), dy.as<float>(), rows, cols, 1.0f,
                              false, nullptr),
              0);
    ASSERT_EQ(kc::gate_up_swiglu_bf16(dw.as<uint16_t>(), dx.as<float>(), dy.as<float>(), inter,
                                      cols, nullptr),
              0);  // overwrites the first `inter` outputs
    sync();
    std::vector<float> got(static_cast<size_t>(rows)), want(static_cast<size_t>(rows));
    dy.download(got.data(), got.size() * 4);
    const kernels::Matrix hm{.data = w.bytes.data(),
                             .dtype = DType::kBF16,
                             .rows = static_cast<size_t>(rows),
                             .cols = static_cast<size_t>(cols)};
    kernels::matvec(pool_, hm, x.data(), want.data());
    std::vector<double> bound(static_cast<size_t>(rows));
    for (int r = 0; r < rows; ++r) {
      double a = 0;
      for (int c = 0; c < cols; ++c)
        a += std::fabs(w.values[static_cast<size_t>(r * cols + c)] * x[static_cast<size_t>(c)]);
      bound[static_cast<size_t>(r)] = 2 * dot_bound(static_cast<size_t>(cols), a);
    }
    for (int i = 0; i < inter; ++i) {
      const double g = want[static_cast<size_t>(i)], u = want[static_cast<size_t>(inter + i)];
      const double ref = g / (1 + std::exp(-g)) * u;
      const double tol = 1.1 * std::fabs(u) * bound[static_cast<size_t>(i)] +
                         std::fabs(g) * bound[static_cast<size_t>(inter + i)] +
                         16 * kU * std::fabs(ref) + 1e-30;
      ASSERT_NEAR(got[static_cast<size_t>(i)], ref, tol) << i;
    }
    for (int r = inter; r < 2 * inter; ++r)  // matvec rows untouched by gate_up
      ASSERT_NEAR(got[static_cast<size_t>(r)], want[static_cast<size_t>(r)],
                  bound[static_cast<size_t>(r)])
          << r;
  }
}

}  // namespace
}  // namespace steermoe::cudatest
