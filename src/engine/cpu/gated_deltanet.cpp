#include "engine/cpu/gated_deltanet.hpp"

#include <algorithm>
#include <cmath>

#include "common/error.hpp"
#include "kernels/linear_attention.hpp"

namespace steermoe::engine {

void LinearAttnState::init(const model::LinearAttnConfig& a) {
  conv.assign(static_cast<size_t>(a.conv_dim()) * static_cast<size_t>(a.conv_kernel - 1), 0.0f);
  recurrent.assign(static_cast<size_t>(a.v_heads) * static_cast<size_t>(a.k_head_dim) *
                       static_cast<size_t>(a.v_head_dim),
                   0.0f);
}

void LinearAttnState::zero() {
  std::fill(conv.begin(), conv.end(), 0.0f);
  std::fill(recurrent.begin(), recurrent.end(), 0.0f);
}

GatedDeltaNet::GatedDeltaNet(const model::ModelConfig& config, int max_batch) : cfg_(config) {
  const model::LinearAttnConfig& a = cfg_.linear;
  const auto B = static_cast<size_t>(max_batch);
  qkv_.resize(B * static_cast<size_t>(a.conv_dim()));
  z_.resize(B * static_cast<size_t>(a.value_dim()));
  b_.resize(B * static_cast<size_t>(a.v_heads));
  a_.resize(B * static_cast<size_t>(a.v_heads));
  core_.resize(B * static_cast<size_t>(a.value_dim()));
}

namespace {

void product(kernels::ThreadPool& pool, const kernels::Matrix& w, const float* x, int n,
             float* y) {
  if (n == 1) {
    kernels::matvec(pool, w, x, y);
  } else {
    kernels::matmul(pool, w, x, static_cast<size_t>(n), y);
  }
}

}  // namespace

void GatedDeltaNet::forward(kernels::ThreadPool& pool, const model::LinearAttnWeights& w,
                            LinearAttnState& st, const float* x, int n, float* out) {
  const model::LinearAttnConfig& a = cfg_.linear;
  SM_ASSERT(static_cast<size_t>(n) * static_cast<size_t>(a.conv_dim()) <= qkv_.size());
  const auto conv_dim = static_cast<size_t>(a.conv_dim());
  const auto kd = static_cast<size_t>(a.key_dim());
  const auto vd = static_cast<size_t>(a.value_dim());
  const auto nk = static_cast<size_t>(a.k_heads);
  const auto nv = static_cast<size_t>(a.v_heads);
  const auto dk = static_cast<size_t>(a.k_head_dim);
  const auto dv = static_cast<size_t>(a.v_head_dim);
  const size_t r = nv / nk;
  const auto K = static_cast<size_t>(a.conv_kernel);
  // transformers: query / (dk ** 0.5)
  const auto sqrt_dk = static_cast<float>(std::sqrt(static_cast<double>(dk)));

  product(pool, w.qkv, x, n, qkv_.data());
  product(pool, w.z, x, n, z_.data());
  product(pool, w.b, x, n, b_.data());
  product(pool, w.a, x, n, a_.data());

  for (size_t t = 0; t < static_cast<size_t>(n); ++t) {
    float* mixed = &qkv_[t * conv_dim];
    kernels::conv1d_silu_step(st.conv.data(), mixed, w.conv.data(), conv_dim, K, mixed);
    float* q = mixed;
    float* k = mixed + kd;
    const float* v = mixed + 2 * kd;
    for (size_t h = 0; h < nk; ++h) {
      kernels::l2norm(q + h * dk, dk, 1e-6f);
      kernels::l2norm(k + h * dk, dk, 1e-6f);
      for (size_t i = 0; i < dk; ++i) q[h * dk + i] = q[h * dk + i] / sqrt_dk;
    }
    float* core = &core_[t * vd];
    for (size_t h = 0; h < nv; ++h) {
      const size_t kh = a.v_heads_tiled ? h % nk : h / r;
      const float beta = 1.0f / (1.0f + std::exp(-b_[t * nv + h]));
      const float g = w.a_neg[h] * kernels::softplus(a_[t * nv + h] + w.dt_bias[h]);
      float* o = core + h * dv;
      kernels::delta_rule_step(&st.recurrent[h * dk * dv], q + kh * dk, k + kh * dk, v + h * dv,
                               g, beta, dk, dv, o);
      kernels::rmsnorm_gated(o, w.norm.data(), &z_[t * vd + h * dv], o, dv, cfg_.rms_eps);
    }
  }
  product(pool, w.out, core_.data(), n, out);
}

}  // namespace steermoe::engine
