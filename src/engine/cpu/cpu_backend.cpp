#include "engine/cpu/cpu_backend.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/error.hpp"
#include "engine/router_scores.hpp"

namespace steermoe::engine {

using kernels::Matrix;
using model::Family;
using model::QkNorm;

// Every activation buffer, sized once for max_batch tokens so that decode() never allocates.
struct CpuBackend::Scratch {
  std::vector<float> x;             // [B][H] residual stream
  std::vector<float> a;             // [B][H] normalised input of a block
  std::vector<float> q;             // [B][heads * q_head_dim]
  std::vector<float> qg;            // [B][heads * 2 * head_dim] gated attention: [q | gate] per head
  std::vector<float> attn_gate;     // [B][heads * head_dim] gated attention: the gate
  std::vector<float> k;             // [B][kv_heads * q_head_dim] (GQA) / [B][kv_lora] (MLA latent)
  std::vector<float> v;             // [B][kv_heads * v_dim] (GQA)
  std::vector<float> qa;            // [B][q_lora] (MLA)
  std::vector<float> ckv;           // [B][kv_lora + rope] (MLA)
  std::vector<float> kvb;           // [B][heads * (nope + v)] (MLA)
  std::vector<float> attn;          // [B][heads * v_dim]
  std::vector<float> o;             // [B][H] block output
  std::vector<float> logits_r;      // [B][E] router logits
  std::vector<float> z;             // [B][E] selection scores
  std::vector<float> ws;            // [B][E] weight scores (sigmoid routers)
  std::vector<float> pre_next;      // [B][E] pre-gate scores for the next MoE layer
  std::vector<float> pre_ws;        // [E] unused weight scores of the pre-gate
  std::vector<int32_t> exp_count;   // [E]
  std::vector<int32_t> exp_tokens;  // [E][B]
  std::vector<float> exp_weights;   // [E][B]
  std::vector<const model::SwigluWeights*> exp_ptr;  // [E] weights of each expert in the batch
  std::vector<float> gathered;      // [B][H]
  std::vector<float> gate;          // [B][ffn_max]
  std::vector<float> up;            // [B][ffn_max]
  std::vector<float> ffn_out;       // [B][H]
  std::vector<float> shared;        // [B][H]
  std::vector<float> exp_gu;        // [K][2 * expert_ffn] decode: gate | up per selected expert
  std::vector<float> exp_out;       // [K][H] decode: down output per selected expert
  std::vector<float> logits;        // [vocab] last-token logits

  // [max(2K, 3)] decode: matrix products run under one synchronisation
  std::vector<kernels::MatvecJob> jobs;
};

namespace {


void product(kernels::ThreadPool& pool, const Matrix& w, const float* x, int n, float* y) {
  if (n == 1) {
    kernels::matvec(pool, w, x, y);
  } else {
    kernels::matmul(pool, w, x, static_cast<size_t>(n), y);
  }
}

}  // namespace

CpuBackend::CpuBackend(const model::Model& model, const CpuBackendParams& params)
    : model_(model),
      cfg_(model.config()),
      params_(params),
      pool_(static_cast<size_t>(std::max(1, params.threads))) {
  const size_t qk = static_cast<size_t>(cfg_.q_head_dim());
  const size_t vd = static_cast<size_t>(cfg_.v_dim());
  kv_ = KvCache(cfg_.layers, params.context, static_cast<size_t>(cfg_.kv_heads) * qk,
                static_cast<size_t>(cfg_.kv_heads) * vd, cfg_.linear_layer);
  const auto B = static_cast<size_t>(params.max_batch);
  const auto H = static_cast<size_t>(cfg_.hidden);
  const auto E = static_cast<size_t>(cfg_.experts);
  const auto K = static_cast<size_t>(cfg_.top_k);
  const auto heads = static_cast<size_t>(cfg_.heads);
  const size_t ffn_max =
      static_cast<size_t>(std::max({cfg_.expert_ffn, cfg_.shared_ffn, cfg_.dense_ffn}));
  s_ = std::make_unique<Scratch>();
  Scratch& s = *s_;
  s.x.resize(B * H);
  s.a.resize(B * H);
  s.q.resize(B * heads * qk);
  if (cfg_.family == Family::kDeepseekV3) {
    const auto lora = static_cast<size_t>(cfg_.mla.kv_lora_rank);
    const auto rope = static_cast<size_t>(cfg_.mla.qk_rope_head_dim);
    const auto nope = static_cast<size_t>(cfg_.mla.qk_nope_head_dim);
    s.qa.resize(B * static_cast<size_t>(std::max(cfg_.mla.q_lora_rank, 1)));
    s.ckv.resize(B * (lora + rope));
    s.k.resize(B * lora);
    s.kvb.resize(B * heads * (nope + vd));
  } else {
    s.k.resize(B * static_cast<size_t>(cfg_.kv_heads) * qk);
    s.v.resize(B * static_cast<size_t>(cfg_.kv_heads) * vd);
  }
  if (cfg_.attn_output_gate) {
    s.qg.resize(B * heads * 2 * qk);
    s.attn_gate.resize(B * heads * qk);
  }
  s.attn.resize(B * heads * vd);
  s.o.resize(B * H);
  s.logits_r.resize(B * E);
  s.z.resize(B * E);
  s.ws.resize(B * E);
  s.pre_next.resize(B * E);
  s.pre_ws.resize(E);
  s.exp_count.resize(E);
  s.exp_tokens.resize(E * B);
  s.exp_weights.resize(E * B);
  s.exp_ptr.resize(E);
  s.gathered.resize(B * H);
  s.gate.resize(B * ffn_max);
  s.up.resize(B * ffn_max);
  s.ffn_out.resize(B * H);
  s.shared.resize(B * H);
  s.exp_gu.resize(K * 2 * static_cast<size_t>(cfg_.expert_ffn));
  s.exp_out.resize(K * H);
  s.jobs.resize(std::max<size_t>(2 * K, 3));
  s.logits.resize(static_cast<size_t>(cfg_.vocab));

  rope_scaled_ = cfg_.rope_scaling.kind != model::RopeScalingKind::kNone;
  rope_inv_freq_ = cfg_.rope_inv_freq();
  rope_factor_ = cfg_.rope_attention_factor();
  if (cfg_.linear_layer_count() > 0) {
    linear_state_.resize(static_cast<size_t>(cfg_.layers));
    for (int l = 0; l < cfg_.layers; ++l) {
      if (cfg_.is_linear(l)) linear_state_[static_cast<size_t>(l)].init(cfg_.linear);
    }
    gdn_ = std::make_unique<GatedDeltaNet>(cfg_, params.max_batch);
  }

  // The attention kernel keeps per-thread scratch that grows with the number of positions; one
  // call over the whole (zeroed) cache sizes it for the full context now, so that decoding never
  // allocates later. (Hybrid models: the first layer that has a KV cache.)
  const kernels::AttentionParams ap{.n_heads = heads,
                                    .n_kv_heads = static_cast<size_t>(cfg_.kv_heads),
                                    .head_dim_k = qk,
                                    .head_dim_v = vd,
                                    .scale = cfg_.attention_scale()};
  int first_attention = 0;
  while (first_attention < cfg_.layers && cfg_.is_linear(first_attention)) ++first_attention;
  if (first_attention < cfg_.layers) {
    kernels::attention(pool_, s.q.data(), kv_.k(first_attention, 0), kv_.v(first_attention, 0),
                       static_cast<size_t>(params.context), s.attn.data(), ap);
  }
}

CpuBackend::~CpuBackend() = default;

std::span<const float> CpuBackend::logits() const { return s_->logits; }

void CpuBackend::embed(std::span<const int32_t> tokens) {
  const auto H = static_cast<size_t>(cfg_.hidden);
  for (size_t t = 0; t < tokens.size(); ++t) model_.embed(tokens[t], &s_->x[t * H]);
}

void CpuBackend::attention(int l, int n, int pos) {
  Scratch& s = *s_;
  const auto H = static_cast<size_t>(cfg_.hidden);
  const model::LayerWeights& w = model_.layer(l);
  for (int t = 0; t < n; ++t) {
    const size_t off = static_cast<size_t>(t) * H;
    kernels::rmsnorm(&s.x[off], w.attn_norm.data(), &s.a[off], H, {.eps = cfg_.rms_eps});
  }
  if (cfg_.is_linear(l)) {
    LinearAttnState& st = linear_state_[static_cast<size_t>(l)];
    if (pos == 0) st.zero();  // a new sequence
    gdn_->forward(pool_, w.linear, st, s.a.data(), n, s.o.data());
  } else if (cfg_.family == Family::kDeepseekV3) {
    attention_mla(l, n, pos);
  } else {
    attention_gqa(l, n, pos);
  }
  kernels::add(s.x.data(), s.o.data(), s.x.data(), static_cast<size_t>(n) * H);
  for (int t = 0; t < n; ++t) {
    const size_t off = static_cast<size_t>(t) * H;
    kernels::rmsnorm(&s.x[off], w.ffn_norm.data(), &s.a[off], H, {.eps = cfg_.rms_eps});
  }
}

void CpuBackend::attention_gqa(int l, int n, int pos0) {
  Scratch& s = *s_;
  const model::LayerWeights& w = model_.layer(l);
  const auto hd = static_cast<size_t>(cfg_.head_dim);
  const auto heads = static_cast<size_t>(cfg_.heads);
  const auto kvh = static_cast<size_t>(cfg_.kv_heads);
  const size_t qw = heads * hd, kw = kvh * hd;
  const bool gated = cfg_.attn_output_gate;
  float* q_out = gated ? s.qg.data() : s.q.data();
  if (n == 1) {
    // One synchronisation for the three projections (each row is computed as by matvec).
    s.jobs[0] = {.w = w.wq, .x = s.a.data(), .y = q_out};
    s.jobs[1] = {.w = w.wk, .x = s.a.data(), .y = s.k.data()};
    s.jobs[2] = {.w = w.wv, .x = s.a.data(), .y = s.v.data()};
    kernels::matvec_batch(pool_, s.jobs.data(), 3);
  } else {
    product(pool_, w.wq, s.a.data(), n, q_out);
    product(pool_, w.wk, s.a.data(), n, s.k.data());
    product(pool_, w.wv, s.a.data(), n, s.v.data());
  }
  if (gated) {
    // Qwen3-Next / 3.5: q_proj rows are [query | gate] per head.
    for (size_t t = 0; t < static_cast<size_t>(n); ++t) {
      for (size_t h = 0; h < heads; ++h) {
        const float* src = &s.qg[(t * heads + h) * 2 * hd];
        std::memcpy(&s.q[t * qw + h * hd], src, hd * sizeof(float));
        std::memcpy(&s.attn_gate[t * qw + h * hd], src + hd, hd * sizeof(float));
      }
    }
  }
  const kernels::RmsNormParams norm{.eps = cfg_.rms_eps};
  const kernels::RopeParams rope{.style = kernels::RopeStyle::kNeox,
                                 .head_dim = hd,
                                 .rot_offset = 0,
                                 .rot_dim = static_cast<size_t>(cfg_.rotary_dim()),
                                 .theta = cfg_.rope_theta,
                                 .inv_freq = rope_scaled_ ? rope_inv_freq_.data() : nullptr,
                                 .attention_factor = rope_factor_};
  const float clip = cfg_.clip_qkv;
  for (int t = 0; t < n; ++t) {
    float* q = &s.q[static_cast<size_t>(t) * qw];
    float* k = &s.k[static_cast<size_t>(t) * kw];
    if (cfg_.qk_norm == QkNorm::kWholeProjection) {
      kernels::rmsnorm(q, w.q_norm.data(), q, qw, norm);
      kernels::rmsnorm(k, w.k_norm.data(), k, kw, norm);
    } else if (cfg_.qk_norm == QkNorm::kPerHead) {
      kernels::rmsnorm_rows(q, w.q_norm.data(), q, heads, hd, norm);
      kernels::rmsnorm_rows(k, w.k_norm.data(), k, kvh, hd, norm);
    }
    if (clip > 0.0f) {
      // OLMoE clip_qkv: clamp after the q/k norms, before RoPE.
      float* v = &s.v[static_cast<size_t>(t) * kw];
      for (size_t i = 0; i < qw; ++i) q[i] = std::clamp(q[i], -clip, clip);
      for (size_t i = 0; i < kw; ++i) k[i] = std::clamp(k[i], -clip, clip);
      for (size_t i = 0; i < kw; ++i) v[i] = std::clamp(v[i], -clip, clip);
    }
    const auto pos = static_cast<size_t>(pos0 + t);
    kernels::rope(q, heads, pos, rope);
    kernels::rope(k, kvh, pos, rope);
    std::memcpy(kv_.k(l, pos0 + t), k, kw * sizeof(float));
    std::memcpy(kv_.v(l, pos0 + t), &s.v[static_cast<size_t>(t) * kw], kw * sizeof(float));
  }
  const kernels::AttentionParams ap{.n_heads = heads,
                                    .n_kv_heads = kvh,
                                    .head_dim_k = hd,
                                    .head_dim_v = hd,
                                    .scale = cfg_.attention_scale()};
  if (n == 1) {
    kernels::attention(pool_, s.q.data(), kv_.k(l, 0), kv_.v(l, 0), static_cast<size_t>(pos0 + 1),
                       s.attn.data(), ap);
  } else {
    kernels::attention_prefill(pool_, s.q.data(), qw, static_cast<size_t>(n),
                               static_cast<size_t>(pos0), kv_.k(l, 0), kv_.v(l, 0), s.attn.data(),
                               qw, ap);
  }
  if (gated) {
    const size_t total = static_cast<size_t>(n) * qw;
    for (size_t i = 0; i < total; ++i) s.attn[i] *= 1.0f / (1.0f + std::exp(-s.attn_gate[i]));
  }
  product(pool_, w.wo, s.attn.data(), n, s.o.data());
}

void CpuBackend::attention_mla(int l, int n, int pos0) {
  Scratch& s = *s_;
  const model::LayerWeights& w = model_.layer(l);
  const model::MlaConfig& m = cfg_.mla;
  const auto heads = static_cast<size_t>(cfg_.heads);
  const auto nope = static_cast<size_t>(m.qk_nope_head_dim);
  const auto rope_dim = static_cast<size_t>(m.qk_rope_head_dim);
  const auto vd = static_cast<size_t>(m.v_head_dim);
  const auto lora = static_cast<size_t>(m.kv_lora_rank);
  const size_t qk = nope + rope_dim;
  const kernels::RmsNormParams lora_norm{.eps = m.lora_norm_eps};
  if (m.q_lora_rank > 0) {
    const auto ql = static_cast<size_t>(m.q_lora_rank);
    product(pool_, w.q_a, s.a.data(), n, s.qa.data());
    for (int t = 0; t < n; ++t) {
      float* qa = &s.qa[static_cast<size_t>(t) * ql];
      kernels::rmsnorm(qa, w.q_a_norm.data(), qa, ql, lora_norm);
    }
    product(pool_, w.q_b, s.qa.data(), n, s.q.data());
  } else {
    product(pool_, w.q_b, s.a.data(), n, s.q.data());
  }
  // c = [latent (kv_lora) | shared rotary key (rope)]; the latent is normalised, then
  // decompressed per head into [k_nope | v].
  product(pool_, w.kv_a, s.a.data(), n, s.ckv.data());
  for (int t = 0; t < n; ++t) {
    kernels::rmsnorm(&s.ckv[static_cast<size_t>(t) * (lora + rope_dim)], w.kv_a_norm.data(),
                     &s.k[static_cast<size_t>(t) * lora], lora, lora_norm);
  }
  product(pool_, w.kv_b, s.k.data(), n, s.kvb.data());
  const kernels::RopeStyle style = cfg_.rope == model::RopeKind::kInterleaved
                                       ? kernels::RopeStyle::kInterleaved
                                       : kernels::RopeStyle::kNeox;
  const kernels::RopeParams q_rope{.style = style,
                                   .head_dim = qk,
                                   .rot_offset = nope,
                                   .rot_dim = rope_dim,
                                   .theta = cfg_.rope_theta,
                                   .inv_freq = rope_scaled_ ? rope_inv_freq_.data() : nullptr,
                                   .attention_factor = rope_factor_};
  const kernels::RopeParams k_rope{.style = style,
                                   .head_dim = rope_dim,
                                   .rot_offset = 0,
                                   .rot_dim = rope_dim,
                                   .theta = cfg_.rope_theta,
                                   .inv_freq = rope_scaled_ ? rope_inv_freq_.data() : nullptr,
                                   .attention_factor = rope_factor_};
  for (int t = 0; t < n; ++t) {
    const auto pos = static_cast<size_t>(pos0 + t);
    kernels::rope(&s.q[static_cast<size_t>(t) * heads * qk], heads, pos, q_rope);
    float* k_rot = &s.ckv[static_cast<size_t>(t) * (lora + rope_dim) + lora];
    kernels::rope(k_rot, 1, pos, k_rope);
    float* kc = kv_.k(l, pos0 + t);
    float* vc = kv_.v(l, pos0 + t);
    const float* kvb = &s.kvb[static_cast<size_t>(t) * heads * (nope + vd)];
    for (size_t h = 0; h < heads; ++h) {
      std::memcpy(kc + h * qk, kvb + h * (nope + vd), nope * sizeof(float));
      std::memcpy(kc + h * qk + nope, k_rot, rope_dim * sizeof(float));
      std::memcpy(vc + h * vd, kvb + h * (nope + vd) + nope, vd * sizeof(float));
    }
  }
  const kernels::AttentionParams ap{.n_heads = heads,
                                    .n_kv_heads = heads,
                                    .head_dim_k = qk,
                                    .head_dim_v = vd,
                                    .scale = cfg_.attention_scale()};
  if (n == 1) {
    kernels::attention(pool_, s.q.data(), kv_.k(l, 0), kv_.v(l, 0), static_cast<size_t>(pos0 + 1),
                       s.attn.data(), ap);
  } else {
    kernels::attention_prefill(pool_, s.q.data(), heads * qk, static_cast<size_t>(n),
                               static_cast<size_t>(pos0), kv_.k(l, 0), kv_.v(l, 0), s.attn.data(),
                               heads * vd, ap);
  }
  product(pool_, w.wo, s.attn.data(), n, s.o.data());
}

void CpuBackend::swiglu_block(const model::SwigluWeights& w, int ffn, const float* in, int n,
                          float* out) {
  Scratch& s = *s_;
  product(pool_, w.gate, in, n, s.gate.data());
  product(pool_, w.up, in, n, s.up.data());
  kernels::swiglu(s.gate.data(), s.up.data(), s.gate.data(),
                  static_cast<size_t>(n) * static_cast<size_t>(ffn));
  product(pool_, w.down, s.gate.data(), n, out);
}

void CpuBackend::dense_ffn(int l, int n) {
  Scratch& s = *s_;
  swiglu_block(model_.layer(l).dense, cfg_.dense_ffn, s.a.data(), n, s.o.data());
  kernels::add(s.x.data(), s.o.data(), s.x.data(),
               static_cast<size_t>(n) * static_cast<size_t>(cfg_.hidden));
}

RouterScores CpuBackend::router(int l, int next, int n) {
  Scratch& s = *s_;
  const model::LayerWeights& w = model_.layer(l);
  const auto E = static_cast<size_t>(cfg_.experts);
  const size_t rows = static_cast<size_t>(n) * E;
  product(pool_, w.router, s.a.data(), n, s.logits_r.data());
  for (int t = 0; t < n; ++t) {
    const size_t off = static_cast<size_t>(t) * E;
    router_scores(cfg_, w.router_bias, &s.logits_r[off], &s.z[off], &s.ws[off]);
  }
  RouterScores out{.z = std::span<const float>(s.z.data(), rows),
                   .weight_scores = std::span<const float>(s.ws.data(), rows)};
  if (next >= 0) {
    // The pre-gate: router `next` applied to this layer's MoE input (the same s.a).
    const model::LayerWeights& wn = model_.layer(next);
    product(pool_, wn.router, s.a.data(), n, s.logits_r.data());
    for (int t = 0; t < n; ++t) {
      const size_t off = static_cast<size_t>(t) * E;
      router_scores(cfg_, wn.router_bias, &s.logits_r[off], &s.pre_next[off], s.pre_ws.data());
    }
    out.pregate_next = std::span<const float>(s.pre_next.data(), rows);
  }
  return out;
}

void CpuBackend::moe(int l, int n, std::span<const ExpertCall> calls) {
  Scratch& s = *s_;
  const model::LayerWeights& w = model_.layer(l);
  const auto H = static_cast<size_t>(cfg_.hidden);
  const auto E = static_cast<size_t>(cfg_.experts);
  const auto B = static_cast<size_t>(params_.max_batch);
  SM_ASSERT(n >= 1 && calls.size() % static_cast<size_t>(n) == 0);
  const size_t K = calls.size() / static_cast<size_t>(n);
  SM_ASSERT(K <= static_cast<size_t>(cfg_.top_k));

  std::fill_n(s.o.begin(), static_cast<size_t>(n) * H, 0.0f);
  if (n == 1) {
    // Gate and up of every selected expert under one synchronisation, then every down under
    // another: the weights of all K experts stream back to back (each row computed as by
    // matvec). Calls are in ascending expert order and accumulated in that order: the same
    // accumulation order as the batched path.
    const auto F = static_cast<size_t>(cfg_.expert_ffn);
    for (size_t i = 0; i < K; ++i) {
      const model::SwigluWeights& ex = *calls[i].weights;
      float* gu = &s.exp_gu[i * 2 * F];
      s.jobs[2 * i] = {.w = ex.gate, .x = s.a.data(), .y = gu};
      s.jobs[2 * i + 1] = {.w = ex.up, .x = s.a.data(), .y = gu + F};
    }
    kernels::matvec_batch(pool_, s.jobs.data(), 2 * K);
    for (size_t i = 0; i < K; ++i) {
      float* gu = &s.exp_gu[i * 2 * F];
      kernels::swiglu(gu, gu + F, gu, F);
      s.jobs[i] = {.w = calls[i].weights->down, .x = gu, .y = &s.exp_out[i * H]};
    }
    kernels::matvec_batch(pool_, s.jobs.data(), K);
    for (size_t i = 0; i < K; ++i)
      kernels::axpy(calls[i].weight, &s.exp_out[i * H], s.o.data(), H);
  } else {
    // Group tokens by expert, run each expert once over its tokens, scatter in expert order.
    std::fill(s.exp_count.begin(), s.exp_count.end(), 0);
    for (int t = 0; t < n; ++t) {
      for (size_t i = 0; i < K; ++i) {
        const ExpertCall& call = calls[static_cast<size_t>(t) * K + i];
        const auto e = static_cast<size_t>(call.expert);
        SM_ASSERT(e < E);
        const auto c = static_cast<size_t>(s.exp_count[e]++);
        s.exp_tokens[e * B + c] = t;
        s.exp_weights[e * B + c] = call.weight;
        s.exp_ptr[e] = call.weights;
      }
    }
    for (size_t e = 0; e < E; ++e) {
      const int count = s.exp_count[e];
      if (count == 0) continue;
      for (int c = 0; c < count; ++c) {
        const auto t = static_cast<size_t>(s.exp_tokens[e * B + static_cast<size_t>(c)]);
        std::memcpy(&s.gathered[static_cast<size_t>(c) * H], &s.a[t * H], H * sizeof(float));
      }
      swiglu_block(*s.exp_ptr[e], cfg_.expert_ffn, s.gathered.data(), count, s.ffn_out.data());
      for (int c = 0; c < count; ++c) {
        const auto t = static_cast<size_t>(s.exp_tokens[e * B + static_cast<size_t>(c)]);
        kernels::axpy(s.exp_weights[e * B + static_cast<size_t>(c)],
                      &s.ffn_out[static_cast<size_t>(c) * H], &s.o[t * H], H);
      }
    }
  }
  if (w.shared.present()) {
    swiglu_block(w.shared, cfg_.shared_ffn, s.a.data(), n, s.shared.data());
    if (!w.shared_gate.empty()) {
      // Qwen3-Next / 3.5: shared expert output *= sigmoid(shared_expert_gate . x).
      for (size_t t = 0; t < static_cast<size_t>(n); ++t) {
        const float g = kernels::dot(w.shared_gate.data(), &s.a[t * H], H);
        kernels::scale(1.0f / (1.0f + std::exp(-g)), &s.shared[t * H], H);
      }
    }
    kernels::add(s.o.data(), s.shared.data(), s.o.data(), static_cast<size_t>(n) * H);
  }
  kernels::add(s.x.data(), s.o.data(), s.x.data(), static_cast<size_t>(n) * H);
}

void CpuBackend::head(int n, std::span<float> all_logits) {
  Scratch& s = *s_;
  const auto H = static_cast<size_t>(cfg_.hidden);
  const auto V = static_cast<size_t>(cfg_.vocab);
  // Final norm (in place: the residual stream is not needed any more) and the output head.
  for (int t = 0; t < n; ++t) {
    const size_t off = static_cast<size_t>(t) * H;
    kernels::rmsnorm(&s.x[off], model_.final_norm().data(), &s.x[off], H, {.eps = cfg_.rms_eps});
  }
  if (!all_logits.empty()) {
    product(pool_, model_.lm_head(), s.x.data(), n, all_logits.data());
    std::memcpy(s.logits.data(), all_logits.data() + static_cast<size_t>(n - 1) * V,
                V * sizeof(float));
  } else {
    kernels::matvec(pool_, model_.lm_head(), &s.x[static_cast<size_t>(n - 1) * H], s.logits.data());
  }
}

}  // namespace steermoe::engine
