#include "engine/ops_backend.hpp"

#include <algorithm>
#include <cstring>

#include "common/error.hpp"
#include "engine/router_scores.hpp"
#include "model/family.hpp"

namespace steermoe::engine {

using model::layer_mixer;
using model::Mixer;
using model::QkNorm;

// Activations (backend memory unless named h_*), sized once for max_batch tokens.
struct OpsBackend::Buffers {
  float* x = nullptr;           // [B][H] residual stream
  float* a = nullptr;           // [B][H] normalised input of a block
  float* q = nullptr;           // [B][heads * q_head_dim]
  float* qg = nullptr;          // [B][heads * 2 * head_dim] gated attention: [q | gate] per head
  float* attn_gate = nullptr;   // [B][heads * head_dim] gated attention: the gate
  float* k = nullptr;           // [B][kv_heads * q_head_dim] (GQA) / [B][kv_lora] (MLA latent)
  float* v = nullptr;           // [B][kv_heads * v_dim] (GQA)
  float* qa = nullptr;          // [B][q_lora] (MLA)
  float* ckv = nullptr;         // [B][kv_lora + rope] (MLA)
  float* kvb = nullptr;         // [B][heads * (nope + v)] (MLA)
  float* attn = nullptr;        // [B][heads * v_dim]
  float* o = nullptr;           // [B][H] block output
  float* gate = nullptr;        // [B][ffn_max]
  float* up = nullptr;          // [B][ffn_max]
  float* shared = nullptr;      // [B][H]
  float* rl = nullptr;          // [2][B][E] router logits (this layer's, the pre-gate's)
  float* logits = nullptr;      // [V] last token's logits
  float* logits_all = nullptr;  // [B][V] (devices only: the CPU writes the caller's buffer)
  float* lin_qkv = nullptr;     // [B][conv_dim] Gated DeltaNet projections
  float* lin_z = nullptr;       // [B][value_dim]
  float* lin_b = nullptr;       // [B][v_heads]
  float* lin_a = nullptr;       // [B][v_heads]
  float* lin_core = nullptr;    // [B][value_dim]
  float* inv_freq = nullptr;    // [rotary / 2] scaled RoPE frequencies (YaRN), else null
  float* h_x = nullptr;         // host [B][H] embeddings
  float* h_rl = nullptr;        // host [2][B][E]
  float* h_logits = nullptr;    // host [V]
  std::vector<DeltaRuleState> lin_state;  // [layers] Gated DeltaNet layers' recurrent states
  std::vector<float> z, ws, pre, pre_ws;  // host router scores
};

namespace {

// Every non-expert matrix and vector the blocks read of one layer (absent ones skipped).
void prepare_layer(Ops& ops, const model::LayerWeights& w) {
  const model::LinearAttnWeights& la = w.linear;
  for (const kernels::Matrix* m :
       {&w.wq,        &w.wk,          &w.wv,         &w.wo,       &w.q_a,
        &w.q_b,       &w.kv_a,        &w.kv_b,       &w.router,   &w.shared.gate,
        &w.shared.up, &w.shared.down, &w.dense.gate, &w.dense.up, &w.dense.down,
        &la.qkv,      &la.z,          &la.b,         &la.a,       &la.out}) {
    if (m->data != nullptr) ops.prepare(*m);
  }
  for (const model::WeightVector* v :
       {&w.attn_norm, &w.ffn_norm, &w.q_norm, &w.k_norm, &w.q_a_norm, &w.kv_a_norm, &w.shared_gate,
        &la.conv, &la.dt_bias, &la.a_neg, &la.norm}) {
    if (!v->empty()) ops.prepare(*v);
  }
}

}  // namespace

OpsBackend::OpsBackend(const model::Model& model, std::unique_ptr<Ops> ops, int context,
                       int max_batch)
    : model_(model), cfg_(model.config()), max_batch_(max_batch), ops_(std::move(ops)) {
  SM_ASSERT(max_batch >= 1 && context >= 1);
  for (int l = 0; l < cfg_.layers; ++l) prepare_layer(*ops_, model.layer(l));
  ops_->prepare(model.final_norm());
  ops_->prepare(model.lm_head());
  allocate(context);
  // The CPU attention kernel keeps per-thread scratch that grows with the number of positions;
  // one call over the whole (zeroed) cache sizes it for the full context now, so that decoding
  // never allocates later. (Hybrid models: the first layer that has a KV cache.)
  int first_attention = 0;
  while (first_attention < cfg_.layers && cfg_.is_linear(first_attention)) ++first_attention;
  if (first_attention < cfg_.layers) {
    ops_->attention(b_->q, ops_->kv_keys(first_attention), ops_->kv_values(first_attention),
                    b_->attn, 1, context - 1, attention_spec());
  }
  ops_->sync();
}

OpsBackend::~OpsBackend() = default;

void OpsBackend::allocate(int context) {
  b_ = std::make_unique<Buffers>();
  Buffers& b = *b_;
  Ops& ops = *ops_;
  const auto B = static_cast<size_t>(max_batch_);
  const auto H = static_cast<size_t>(cfg_.hidden);
  const auto E = static_cast<size_t>(cfg_.experts);
  const auto V = static_cast<size_t>(cfg_.vocab);
  const auto heads = static_cast<size_t>(cfg_.heads);
  const auto qk = static_cast<size_t>(cfg_.q_head_dim());
  const auto vd = static_cast<size_t>(cfg_.v_dim());
  const auto kvh = static_cast<size_t>(cfg_.kv_heads);
  const auto ffn_max =
      static_cast<size_t>(std::max({cfg_.expert_ffn, cfg_.shared_ffn, cfg_.dense_ffn, 1}));
  ops.alloc_kv(cfg_.layers, context, kvh * qk, kvh * vd, cfg_.linear_layer);
  b.x = ops.alloc(B * H);
  b.a = ops.alloc(B * H);
  b.q = ops.alloc(B * heads * qk);
  bool mla = false;  // buffers of the mixers the model's layers use
  for (int l = 0; l < cfg_.layers; ++l) mla = mla || layer_mixer(cfg_, l) == Mixer::kMla;
  if (mla) {
    const auto lora = static_cast<size_t>(cfg_.mla.kv_lora_rank);
    const auto rope = static_cast<size_t>(cfg_.mla.qk_rope_head_dim);
    const auto nope = static_cast<size_t>(cfg_.mla.qk_nope_head_dim);
    b.qa = ops.alloc(B * static_cast<size_t>(std::max(cfg_.mla.q_lora_rank, 1)));
    b.ckv = ops.alloc(B * (lora + rope));
    b.k = ops.alloc(B * lora);
    b.kvb = ops.alloc(B * heads * (nope + vd));
  } else {
    b.k = ops.alloc(B * kvh * qk);
    b.v = ops.alloc(B * kvh * vd);
  }
  if (cfg_.attn_output_gate) {
    b.qg = ops.alloc(B * heads * 2 * qk);
    b.attn_gate = ops.alloc(B * heads * qk);
  }
  b.attn = ops.alloc(B * heads * vd);
  b.o = ops.alloc(B * H);
  b.gate = ops.alloc(B * ffn_max);
  b.up = ops.alloc(B * ffn_max);
  b.shared = ops.alloc(B * H);
  b.rl = ops.alloc(2 * B * E);
  b.logits = ops.alloc(V);
  const bool host = ops.host_memory();
  b.logits_all = host ? nullptr : ops.alloc(B * V);
  b.h_x = host ? b.x : ops.alloc_host(B * H);
  b.h_rl = host ? b.rl : ops.alloc_host(2 * B * E);
  b.h_logits = host ? b.logits : ops.alloc_host(V);
  b.z.resize(B * E);
  b.ws.resize(B * E);
  b.pre.resize(B * E);
  b.pre_ws.resize(E);
  if (cfg_.rope_scaling.kind != model::RopeScalingKind::kNone) {
    const std::vector<float> inv = cfg_.rope_inv_freq();
    b.inv_freq = ops.alloc(inv.size());
    ops.upload(b.inv_freq, inv.data(), inv.size());
  }
  if (cfg_.linear_layer_count() > 0) {
    const model::LinearAttnConfig& la = cfg_.linear;
    const auto conv_dim = static_cast<size_t>(la.conv_dim());
    const auto value_dim = static_cast<size_t>(la.value_dim());
    const auto nv = static_cast<size_t>(la.v_heads);
    b.lin_qkv = ops.alloc(B * conv_dim);
    b.lin_z = ops.alloc(B * value_dim);
    b.lin_b = ops.alloc(B * nv);
    b.lin_a = ops.alloc(B * nv);
    b.lin_core = ops.alloc(B * value_dim);
    b.lin_state.resize(static_cast<size_t>(cfg_.layers));
    for (int l = 0; l < cfg_.layers; ++l) {
      if (!cfg_.is_linear(l)) continue;
      DeltaRuleState& st = b.lin_state[static_cast<size_t>(l)];
      st.conv = ops.alloc(conv_dim * static_cast<size_t>(la.conv_kernel - 1));
      st.recurrent = ops.alloc(nv * static_cast<size_t>(la.k_head_dim * la.v_head_dim));
    }
  }
}

AttentionSpec OpsBackend::attention_spec() const {
  return {.heads = cfg_.heads,
          .kv_heads = cfg_.kv_heads,
          .dk = cfg_.q_head_dim(),
          .dv = cfg_.v_dim(),
          .scale = cfg_.attention_scale()};
}

const float* OpsBackend::host_view(float* host, const float* src, size_t count) {
  if (ops_->host_memory()) return src;
  ops_->download(host, src, count);
  return host;
}

std::span<const float> OpsBackend::logits() const {
  return {b_->h_logits, static_cast<size_t>(cfg_.vocab)};
}

void OpsBackend::embed(std::span<const int32_t> tokens) {
  const auto H = static_cast<size_t>(cfg_.hidden);
  SM_ASSERT(tokens.size() <= static_cast<size_t>(max_batch_));
  // The previous call's copy out of h_x is complete: every forward ends with a host sync.
  for (size_t t = 0; t < tokens.size(); ++t) model_.embed(tokens[t], b_->h_x + t * H);
  ops_->upload(b_->x, b_->h_x, tokens.size() * H);
}

void OpsBackend::attention(int l, int n, int pos) {
  Buffers& b = *b_;
  const int H = cfg_.hidden;
  const model::LayerWeights& w = model_.layer(l);
  ops_->rmsnorm(b.x, H, w.attn_norm, b.a, H, n, H, cfg_.rms_eps);
  switch (layer_mixer(cfg_, l)) {
    case Mixer::kGqa:
      gqa_attention(l, n, pos);
      break;
    case Mixer::kMla:
      mla_attention(l, n, pos);
      break;
    case Mixer::kGatedDeltaNet:
      gated_deltanet(l, n, pos);
      break;
  }
  ops_->add(b.x, b.o, b.x, static_cast<int64_t>(n) * H);
  ops_->rmsnorm(b.x, H, w.ffn_norm, b.a, H, n, H, cfg_.rms_eps);
}

void OpsBackend::gqa_attention(int l, int n, int pos0) {
  Buffers& b = *b_;
  Ops& ops = *ops_;
  const model::LayerWeights& w = model_.layer(l);
  const int hd = cfg_.head_dim;
  const int heads = cfg_.heads;
  const int kvh = cfg_.kv_heads;
  const int qw = heads * hd, kw = kvh * hd;
  const bool gated = cfg_.attn_output_gate;
  const Product qkv[] = {{&w.wq, b.a, gated ? b.qg : b.q}, {&w.wk, b.a, b.k}, {&w.wv, b.a, b.v}};
  ops.matmul(qkv, n);
  if (gated) {
    // Qwen3-Next / 3.5: q_proj rows are [query | gate] per head.
    const CopySpec split{.rows = n * heads, .cols = hd, .src_row = 2 * hd, .dst_row = hd};
    ops.copy(b.qg, b.q, split);
    ops.copy(b.qg + hd, b.attn_gate, split);
  }
  const float eps = cfg_.rms_eps;
  if (cfg_.qk_norm == QkNorm::kWholeProjection) {
    ops.rmsnorm(b.q, qw, w.q_norm, b.q, qw, n, qw, eps);
    ops.rmsnorm(b.k, kw, w.k_norm, b.k, kw, n, kw, eps);
  } else if (cfg_.qk_norm == QkNorm::kPerHead) {
    ops.rmsnorm(b.q, hd, w.q_norm, b.q, hd, n * heads, hd, eps);
    ops.rmsnorm(b.k, hd, w.k_norm, b.k, hd, n * kvh, hd, eps);
  }
  if (const float clip = cfg_.clip_qkv; clip > 0.0f) {
    // OLMoE clip_qkv: clamp after the q/k norms, before RoPE.
    ops.clamp(b.q, static_cast<int64_t>(n) * qw, clip);
    ops.clamp(b.k, static_cast<int64_t>(n) * kw, clip);
    ops.clamp(b.v, static_cast<int64_t>(n) * kw, clip);
  }
  const RopeSpec rope{.style = kernels::RopeStyle::kNeox,
                      .head_stride = hd,
                      .rot_offset = 0,
                      .rot_dim = cfg_.rotary_dim(),
                      .theta = cfg_.rope_theta,
                      .inv_freq = b.inv_freq,
                      .attention_factor = cfg_.rope_attention_factor()};
  ops.rope(b.q, n, qw, heads, pos0, rope);
  ops.rope(b.k, n, kw, kvh, pos0, rope);
  const CopySpec rows{.rows = n, .cols = kw, .src_row = kw, .dst_row = kw};
  ops.copy(b.k, ops.kv_keys(l) + static_cast<int64_t>(pos0) * kw, rows);
  ops.copy(b.v, ops.kv_values(l) + static_cast<int64_t>(pos0) * kw, rows);
  ops.attention(b.q, ops.kv_keys(l), ops.kv_values(l), b.attn, n, pos0, attention_spec());
  if (gated) ops.sigmoid_mul(b.attn, b.attn_gate, static_cast<int64_t>(n) * qw);
  const Product out[] = {{&w.wo, b.attn, b.o}};
  ops.matmul(out, n);
}

void OpsBackend::mla_attention(int l, int n, int pos0) {
  Buffers& b = *b_;
  Ops& ops = *ops_;
  const model::LayerWeights& w = model_.layer(l);
  const model::MlaConfig& m = cfg_.mla;
  const int heads = cfg_.heads;
  const int nope = m.qk_nope_head_dim, rope_dim = m.qk_rope_head_dim, vd = m.v_head_dim;
  const int lora = m.kv_lora_rank;
  const int qk = nope + rope_dim;
  // c = [latent (kv_lora) | shared rotary key (rope)]; the latent is normalised, then
  // decompressed per head into [k_nope | v].
  if (m.q_lora_rank > 0) {
    const Product first[] = {{&w.q_a, b.a, b.qa}, {&w.kv_a, b.a, b.ckv}};
    ops.matmul(first, n);
    ops.rmsnorm(b.qa, m.q_lora_rank, w.q_a_norm, b.qa, m.q_lora_rank, n, m.q_lora_rank,
                m.lora_norm_eps);
    const Product q[] = {{&w.q_b, b.qa, b.q}};
    ops.matmul(q, n);
  } else {
    const Product first[] = {{&w.q_b, b.a, b.q}, {&w.kv_a, b.a, b.ckv}};
    ops.matmul(first, n);
  }
  ops.rmsnorm(b.ckv, lora + rope_dim, w.kv_a_norm, b.k, lora, n, lora, m.lora_norm_eps);
  const Product kv[] = {{&w.kv_b, b.k, b.kvb}};
  ops.matmul(kv, n);
  RopeSpec rope{.style = cfg_.rope == model::RopeKind::kInterleaved
                             ? kernels::RopeStyle::kInterleaved
                             : kernels::RopeStyle::kNeox,
                .head_stride = qk,
                .rot_offset = nope,
                .rot_dim = rope_dim,
                .theta = cfg_.rope_theta,
                .inv_freq = b.inv_freq,
                .attention_factor = cfg_.rope_attention_factor()};
  ops.rope(b.q, n, static_cast<int64_t>(heads) * qk, heads, pos0, rope);
  rope.head_stride = rope_dim;
  rope.rot_offset = 0;
  float* k_rot = b.ckv + lora;
  ops.rope(k_rot, n, lora + rope_dim, 1, pos0, rope);
  // Cache rows per head: key [k_nope | the shared rotary key], value v.
  float* kc = ops.kv_keys(l) + static_cast<int64_t>(pos0) * heads * qk;
  float* vc = ops.kv_values(l) + static_cast<int64_t>(pos0) * heads * vd;
  ops.copy(b.kvb, kc, {.rows = n * heads, .cols = nope, .src_row = nope + vd, .dst_row = qk});
  ops.copy(k_rot, kc + nope,
           {.outer = n,
            .rows = heads,
            .cols = rope_dim,
            .src_outer = lora + rope_dim,
            .src_row = 0,
            .dst_outer = static_cast<int64_t>(heads) * qk,
            .dst_row = qk});
  ops.copy(b.kvb + nope, vc, {.rows = n * heads, .cols = vd, .src_row = nope + vd, .dst_row = vd});
  ops.attention(b.q, ops.kv_keys(l), ops.kv_values(l), b.attn, n, pos0, attention_spec());
  const Product out[] = {{&w.wo, b.attn, b.o}};
  ops.matmul(out, n);
}

void OpsBackend::gated_deltanet(int l, int n, int pos0) {
  Buffers& b = *b_;
  Ops& ops = *ops_;
  const model::LinearAttnWeights& w = model_.layer(l).linear;
  const model::LinearAttnConfig& la = cfg_.linear;
  const Product in[] = {
      {&w.qkv, b.a, b.lin_qkv}, {&w.z, b.a, b.lin_z}, {&w.b, b.a, b.lin_b}, {&w.a, b.a, b.lin_a}};
  ops.matmul(in, n);
  const DeltaRuleState st = b.lin_state[static_cast<size_t>(l)];
  if (pos0 == 0) {  // a new sequence
    ops.zero(st.conv, static_cast<size_t>(la.conv_dim()) * static_cast<size_t>(la.conv_kernel - 1));
    ops.zero(st.recurrent,
             static_cast<size_t>(la.v_heads) * static_cast<size_t>(la.k_head_dim * la.v_head_dim));
  }
  const DeltaRuleSpec spec{.k_heads = la.k_heads,
                           .v_heads = la.v_heads,
                           .dk = la.k_head_dim,
                           .dv = la.v_head_dim,
                           .conv_kernel = la.conv_kernel,
                           .v_heads_tiled = la.v_heads_tiled,
                           .eps = cfg_.rms_eps};
  ops.delta_rule(spec, {.conv = w.conv, .a_neg = w.a_neg, .dt_bias = w.dt_bias, .norm = w.norm}, st,
                 b.lin_qkv, b.lin_z, b.lin_b, b.lin_a, n, b.lin_core);
  const Product out[] = {{&w.out, b.lin_core, b.o}};
  ops.matmul(out, n);
}

void OpsBackend::swiglu_ffn(const model::SwigluWeights& w, int ffn, const float* in, int n,
                            float* out) {
  Buffers& b = *b_;
  const Product gate_up[] = {{&w.gate, in, b.gate}, {&w.up, in, b.up}};
  ops_->matmul(gate_up, n);
  ops_->swiglu(b.gate, b.up, b.gate, static_cast<int64_t>(n) * ffn);
  const Product down[] = {{&w.down, b.gate, out}};
  ops_->matmul(down, n);
}

void OpsBackend::dense_ffn(int l, int n) {
  Buffers& b = *b_;
  swiglu_ffn(model_.layer(l).dense, cfg_.dense_ffn, b.a, n, b.o);
  ops_->add(b.x, b.o, b.x, static_cast<int64_t>(n) * cfg_.hidden);
}

RouterScores OpsBackend::router(int l, int next, int n) {
  Buffers& b = *b_;
  const auto E = static_cast<size_t>(cfg_.experts);
  const auto B = static_cast<size_t>(max_batch_);
  const size_t rows = static_cast<size_t>(n) * E;
  const model::LayerWeights& w = model_.layer(l);
  // The pre-gate: router `next` applied to this layer's MoE input (the same a).
  const Product p[] = {{&w.router, b.a, b.rl},
                       {next >= 0 ? &model_.layer(next).router : nullptr, b.a, b.rl + B * E}};
  ops_->matmul(std::span(p, next >= 0 ? 2 : 1), n);
  const float* logits = host_view(b.h_rl, b.rl, rows);
  const float* pre = next >= 0 ? host_view(b.h_rl + B * E, b.rl + B * E, rows) : nullptr;
  // The layer's one synchronisation: the policy needs the scores on the host.
  ops_->sync();
  for (size_t off = 0; off < rows; off += E)
    router_scores(cfg_, w.router_bias, logits + off, &b.z[off], &b.ws[off]);
  RouterScores out{.z = std::span<const float>(b.z.data(), rows),
                   .weight_scores = std::span<const float>(b.ws.data(), rows)};
  if (next >= 0) {
    const model::LayerWeights& wn = model_.layer(next);
    for (size_t off = 0; off < rows; off += E)
      router_scores(cfg_, wn.router_bias, pre + off, &b.pre[off], b.pre_ws.data());
    out.pregate_next = std::span<const float>(b.pre.data(), rows);
  }
  return out;
}

void OpsBackend::moe(int l, int n, std::span<const ExpertCall> calls) {
  Buffers& b = *b_;
  ops_->moe(l, b.a, n, calls, b.o);
  shared_expert(l, n);
  add_moe_output(l, n);
}

// The shared expert goes with the first part: it needs no copy, so it computes while the
// routed experts' copies complete. The sum is the same as moe()'s (routed sum, then + shared).
void OpsBackend::moe_part(int l, std::span<const ExpertCall> calls, std::span<const int32_t> picks,
                          bool first, bool last) {
  Buffers& b = *b_;
  if (first) shared_expert(l, 1);
  ops_->moe_part(l, b.a, calls, picks, last, b.o);
  if (last) add_moe_output(l, 1);
}

void OpsBackend::shared_expert(int l, int n) {
  Buffers& b = *b_;
  const model::LayerWeights& w = model_.layer(l);
  if (!w.shared.present()) return;
  swiglu_ffn(w.shared, cfg_.shared_ffn, b.a, n, b.shared);
  // Qwen3-Next / 3.5: shared expert output *= sigmoid(shared_expert_gate . x).
  if (!w.shared_gate.empty()) ops_->sigmoid_dot_scale(b.shared, b.a, w.shared_gate, n, cfg_.hidden);
}

void OpsBackend::add_moe_output(int l, int n) {
  Buffers& b = *b_;
  const int64_t count = static_cast<int64_t>(n) * cfg_.hidden;
  // Shared experts are added after the routed sum.
  if (model_.layer(l).shared.present()) ops_->add(b.o, b.shared, b.o, count);
  ops_->add(b.x, b.o, b.x, count);
  // The expert references (a device slot may be refilled next) are not read after this returns.
  ops_->sync();
}

void OpsBackend::head(int n, std::span<float> all_logits) {
  Buffers& b = *b_;
  const int H = cfg_.hidden;
  const auto V = static_cast<size_t>(cfg_.vocab);
  // Final norm (in place: the residual stream is not needed any more) and the output head.
  ops_->rmsnorm(b.x, H, model_.final_norm(), b.x, H, n, H, cfg_.rms_eps);
  if (!all_logits.empty()) {
    float* dst = ops_->host_memory() ? all_logits.data() : b.logits_all;
    const Product p[] = {{&model_.lm_head(), b.x, dst}};
    ops_->matmul(p, n);
    ops_->download(all_logits.data(), dst, static_cast<size_t>(n) * V);
    ops_->sync();
    std::memcpy(b.h_logits, all_logits.data() + static_cast<size_t>(n - 1) * V, V * sizeof(float));
  } else {
    const Product p[] = {{&model_.lm_head(), b.x + static_cast<int64_t>(n - 1) * H, b.logits}};
    ops_->matmul(p, 1);
    ops_->download(b.h_logits, b.logits, V);
    ops_->sync();
  }
}

}  // namespace steermoe::engine
