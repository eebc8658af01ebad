#include "engine/cpu/cpu_ops.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/error.hpp"
#include "kernels/linear_attention.hpp"

namespace steermoe::engine {

using kernels::Matrix;

// MoE and product scratch, sized once for max_batch tokens so that no op allocates.
struct CpuOps::Scratch {
  // prefill (moe_grouped): the batch's (token, expert) pairs as slots, grouped by expert
  std::vector<int32_t> exp_count;                    // [E] slots of each expert
  std::vector<int32_t> exp_first;                    // [E] its first slot
  std::vector<const model::SwigluWeights*> exp_ptr;  // [E] weights of each expert in the batch
  std::vector<int32_t> slot_token;                   // [B * K]
  std::vector<float> slot_weight;                    // [B * K]
  std::vector<int32_t> token_slots;  // [B][K] each token's slots in ascending expert order
  std::vector<int32_t> token_fill;   // [B]
  std::vector<float> slot_x;         // [B * K][H] each slot's input, then its expert's output
  std::vector<float> slot_gate;      // [B * K][F] gate, then the SwiGLU
  std::vector<float> slot_up;        // [B * K][F]
  std::vector<kernels::MatmulJob> expert_jobs;  // [2 * E]
  std::vector<float> exp_gu;                    // [K][2 * F] decode: gate | up per selected expert
  std::vector<float> exp_out;                   // [K][H] decode: down output per selected expert
  std::vector<int32_t> all_calls;               // [K] 0 .. K-1: moe_decode's one part
  // decode: matrix products run under one synchronisation
  std::vector<kernels::MatvecJob> jobs;
};

namespace {

// One product over n tokens: a matrix-vector product for one token (decode), else the batched
// product, which reads every weight row once for all n (each row equal to matvec's).
void product(kernels::ThreadPool& pool, const Matrix& w, const float* x, int n, float* y) {
  if (n == 1) {
    kernels::matvec(pool, w, x, y);
  } else {
    kernels::matmul(pool, w, x, static_cast<size_t>(n), y);
  }
}

float sigmoid(float x) {
  return 1.0f / (1.0f + std::exp(-x));
}

constexpr size_t kMaxProducts = kernels::kMaxBatchJobs;  // products of one matmul() call

}  // namespace

CpuOps::CpuOps(const CpuOpsParams& params)
    : params_(params), pool_(static_cast<size_t>(std::max(1, params.threads))) {
  const auto B = static_cast<size_t>(std::max(1, params.max_batch));
  const auto H = static_cast<size_t>(params.hidden);
  const auto E = static_cast<size_t>(params.experts);
  const auto K = static_cast<size_t>(params.top_k);
  const auto F = static_cast<size_t>(params.expert_ffn);
  s_ = std::make_unique<Scratch>();
  Scratch& s = *s_;
  s.exp_count.resize(E);
  s.exp_first.resize(E);
  s.exp_ptr.resize(E);
  s.slot_token.resize(B * K);
  s.slot_weight.resize(B * K);
  s.token_slots.resize(B * K);
  s.token_fill.resize(B);
  s.slot_x.resize(B * K * H);
  s.slot_gate.resize(B * K * F);
  s.slot_up.resize(B * K * F);
  s.expert_jobs.resize(2 * E);
  s.exp_gu.resize(K * 2 * F);
  s.exp_out.resize(K * H);
  s.all_calls.resize(K);
  for (size_t i = 0; i < K; ++i) s.all_calls[i] = static_cast<int32_t>(i);
  s.jobs.resize(std::max(2 * K, kMaxProducts));
}

CpuOps::~CpuOps() = default;

float* CpuOps::alloc(size_t count) {
  owned_.push_back(std::make_unique<float[]>(std::max<size_t>(count, 1)));  // zeroed
  return owned_.back().get();
}

void CpuOps::alloc_kv(int layers, int positions, size_t k_width, size_t v_width,
                      const std::vector<uint8_t>& skip) {
  kv_ = KvCache(layers, positions, k_width, v_width, skip);
}

void CpuOps::upload(float* dst, const float* host, size_t count) {
  if (dst != host) std::memcpy(dst, host, count * sizeof(float));
}

void CpuOps::download(float* host, const float* src, size_t count) {
  if (host != src) std::memcpy(host, src, count * sizeof(float));
}

void CpuOps::matmul(std::span<const Product> products, int n) {
  if (products.size() > 1) {
    // One synchronisation for every product (each row computed as by matvec / matmul; products
    // of one input quantize it once).
    SM_ASSERT(products.size() <= kMaxProducts && products.size() <= s_->jobs.size());
    for (size_t i = 0; i < products.size(); ++i)
      s_->jobs[i] = {.w = *products[i].w, .x = products[i].x, .y = products[i].y};
    kernels::matmul_batch(pool_, s_->jobs.data(), products.size(), static_cast<size_t>(n));
    return;
  }
  for (const Product& p : products) product(pool_, *p.w, p.x, n, p.y);
}

void CpuOps::rmsnorm(const float* x, int64_t x_stride, std::span<const float> w, float* out,
                     int64_t out_stride, int rows, int dim, float eps) {
  const float* weight = w.empty() ? nullptr : w.data();
  for (int r = 0; r < rows; ++r) {
    kernels::rmsnorm(x + r * x_stride, weight, out + r * out_stride, static_cast<size_t>(dim),
                     {.eps = eps});
  }
}

void CpuOps::rope(float* x, int n, int64_t token_stride, int heads, int pos0,
                  const RopeSpec& spec) {
  const kernels::RopeParams p{.style = spec.style,
                              .head_dim = static_cast<size_t>(spec.head_stride),
                              .rot_offset = static_cast<size_t>(spec.rot_offset),
                              .rot_dim = static_cast<size_t>(spec.rot_dim),
                              .theta = spec.theta,
                              .inv_freq = spec.inv_freq,
                              .attention_factor = spec.attention_factor};
  for (int t = 0; t < n; ++t)
    kernels::rope(x + t * token_stride, static_cast<size_t>(heads), static_cast<size_t>(pos0 + t),
                  p);
}

void CpuOps::attention(const float* q, const float* k_cache, const float* v_cache, float* out,
                       int n, int pos0, const AttentionSpec& spec) {
  const kernels::AttentionParams ap{.n_heads = static_cast<size_t>(spec.heads),
                                    .n_kv_heads = static_cast<size_t>(spec.kv_heads),
                                    .head_dim_k = static_cast<size_t>(spec.dk),
                                    .head_dim_v = static_cast<size_t>(spec.dv),
                                    .scale = spec.scale};
  if (n == 1) {
    kernels::attention(pool_, q, k_cache, v_cache, static_cast<size_t>(pos0 + 1), out, ap);
    return;
  }
  // Query i of the batch equals attention() at position pos0 + i bit for bit.
  kernels::attention_prefill(pool_, q, ap.n_heads * ap.head_dim_k, static_cast<size_t>(n),
                             static_cast<size_t>(pos0), k_cache, v_cache, out,
                             ap.n_heads * ap.head_dim_v, ap);
}

void CpuOps::swiglu(const float* gate, const float* up, float* out, int64_t count) {
  kernels::swiglu(gate, up, out, static_cast<size_t>(count));
}

void CpuOps::add(const float* a, const float* b, float* out, int64_t count) {
  kernels::add(a, b, out, static_cast<size_t>(count));
}

void CpuOps::clamp(float* x, int64_t count, float limit) {
  for (int64_t i = 0; i < count; ++i) x[i] = std::clamp(x[i], -limit, limit);
}

void CpuOps::sigmoid_mul(float* x, const float* gate, int64_t count) {
  for (int64_t i = 0; i < count; ++i) x[i] *= sigmoid(gate[i]);
}

void CpuOps::sigmoid_dot_scale(float* x, const float* a, std::span<const float> w, int rows,
                               int dim) {
  const auto d = static_cast<size_t>(dim);
  for (size_t r = 0; r < static_cast<size_t>(rows); ++r) {
    const float g = kernels::dot(w.data(), a + r * d, d);
    kernels::scale(sigmoid(g), x + r * d, d);
  }
}

void CpuOps::copy(const float* src, float* dst, const CopySpec& c) {
  const size_t bytes = static_cast<size_t>(c.cols) * sizeof(float);
  for (int o = 0; o < c.outer; ++o) {
    for (int r = 0; r < c.rows; ++r) {
      std::memcpy(dst + o * c.dst_outer + r * c.dst_row, src + o * c.src_outer + r * c.src_row,
                  bytes);
    }
  }
}

void CpuOps::zero(float* x, size_t count) {
  std::fill_n(x, count, 0.0f);
}

void CpuOps::moe(int /*layer*/, const float* x, int n, std::span<const ExpertCall> calls,
                 float* out) {
  SM_ASSERT(n >= 1 && n <= params_.max_batch && calls.size() % static_cast<size_t>(n) == 0);
  SM_ASSERT(calls.size() / static_cast<size_t>(n) <= static_cast<size_t>(params_.top_k));
  if (n == 1) {
    moe_decode(x, calls, out);  // sum_decoded writes every element of out
    return;
  }
  std::fill_n(out, static_cast<size_t>(n) * static_cast<size_t>(params_.hidden), 0.0f);
  moe_grouped(x, n, calls, out);
}

void CpuOps::moe_part(int /*layer*/, const float* x, std::span<const ExpertCall> calls,
                      std::span<const int32_t> picks, bool last, float* out) {
  SM_ASSERT(calls.size() <= static_cast<size_t>(params_.top_k));
  decode_experts(x, calls, picks);
  if (last) sum_decoded(calls, out);
}

// Gate and up of every selected expert under one synchronisation, then every down under another:
// the weights of all K experts stream back to back (each row computed as by matvec). Calls are in
// ascending expert order and accumulated in that order, as in the grouped path. moe_part runs the
// same per expert and the same sum, so a layer in parts gives these bits.
void CpuOps::moe_decode(const float* x, std::span<const ExpertCall> calls, float* out) {
  decode_experts(x, calls, std::span<const int32_t>(s_->all_calls.data(), calls.size()));
  sum_decoded(calls, out);
}

void CpuOps::decode_experts(const float* x, std::span<const ExpertCall> calls,
                            std::span<const int32_t> picks) {
  Scratch& s = *s_;
  const auto H = static_cast<size_t>(params_.hidden);
  const auto F = static_cast<size_t>(params_.expert_ffn);
  const size_t P = picks.size();
  for (size_t j = 0; j < P; ++j) {
    const auto i = static_cast<size_t>(picks[j]);
    SM_ASSERT(i < calls.size());
    const model::SwigluWeights& ex = *calls[i].weights;
    SM_ASSERT(ex.gate.rows == F);
    float* gu = &s.exp_gu[i * 2 * F];
    s.jobs[2 * j] = {.w = ex.gate, .x = x, .y = gu};
    s.jobs[2 * j + 1] = {.w = ex.up, .x = x, .y = gu + F};
  }
  kernels::matvec_batch(pool_, s.jobs.data(), 2 * P);
  for (size_t j = 0; j < P; ++j) {
    const auto i = static_cast<size_t>(picks[j]);
    float* gu = &s.exp_gu[i * 2 * F];
    kernels::swiglu(gu, gu + F, gu, F);
    s.jobs[j] = {.w = calls[i].weights->down, .x = gu, .y = &s.exp_out[i * H]};
  }
  kernels::matvec_batch(pool_, s.jobs.data(), P);
}

void CpuOps::sum_decoded(std::span<const ExpertCall> calls, float* out) {
  const auto H = static_cast<size_t>(params_.hidden);
  std::fill_n(out, H, 0.0f);
  for (size_t i = 0; i < calls.size(); ++i)
    kernels::axpy(calls[i].weight, &s_->exp_out[i * H], out, H);
}

// Tokens grouped by expert: each expert runs once over its tokens. Every expert's gate and up
// run under one synchronisation, then every down under another (kernels::matmul_grouped; each
// row computed as by matvec), instead of two per expert: with ~8 tokens per expert the
// per-expert synchronisations and the serial gathers, SwiGLUs and sums between them had left the
// second thread idle. The outputs are summed into each token in ascending expert order, as the
// decode path does.
void CpuOps::moe_grouped(const float* x, int n, std::span<const ExpertCall> calls, float* out) {
  Scratch& s = *s_;
  const auto H = static_cast<size_t>(params_.hidden);
  const auto E = static_cast<size_t>(params_.experts);
  const auto F = static_cast<size_t>(params_.expert_ffn);
  const auto tokens = static_cast<size_t>(n);
  const size_t K = calls.size() / tokens;
  std::fill(s.exp_count.begin(), s.exp_count.end(), 0);
  for (const ExpertCall& call : calls) {
    const auto e = static_cast<size_t>(call.expert);
    SM_ASSERT(e < E && call.weights->gate.rows == F);
    ++s.exp_count[e];
    s.exp_ptr[e] = call.weights;
  }
  int32_t slots = 0;
  for (size_t e = 0; e < E; ++e) {
    s.exp_first[e] = slots;
    slots += s.exp_count[e];
  }
  std::fill(s.exp_count.begin(), s.exp_count.end(), 0);
  for (size_t t = 0; t < tokens; ++t) {
    for (size_t i = 0; i < K; ++i) {
      const ExpertCall& call = calls[t * K + i];
      const auto e = static_cast<size_t>(call.expert);
      const auto slot = static_cast<size_t>(s.exp_first[e] + s.exp_count[e]++);
      s.slot_token[slot] = static_cast<int32_t>(t);
      s.slot_weight[slot] = call.weight;
    }
  }
  // Slots are in ascending expert order, so each token's list is too.
  std::fill_n(s.token_fill.begin(), tokens, 0);
  for (int32_t slot = 0; slot < slots; ++slot) {
    const auto t = static_cast<size_t>(s.slot_token[static_cast<size_t>(slot)]);
    s.token_slots[t * K + static_cast<size_t>(s.token_fill[t]++)] = slot;
  }
  pool_.parallel_for(static_cast<size_t>(slots), [&](size_t begin, size_t end) {
    for (size_t slot = begin; slot < end; ++slot) {
      const auto t = static_cast<size_t>(s.slot_token[slot]);
      std::memcpy(&s.slot_x[slot * H], x + t * H, H * sizeof(float));
    }
  });
  size_t jobs = 0;
  for (size_t e = 0; e < E; ++e) {
    const auto count = static_cast<size_t>(s.exp_count[e]);
    if (count == 0) continue;
    const auto first = static_cast<size_t>(s.exp_first[e]);
    const model::SwigluWeights& w = *s.exp_ptr[e];
    // Gate then up of the same inputs: one quantization of them (block types).
    s.expert_jobs[jobs++] = {
        .w = w.gate, .x = &s.slot_x[first * H], .y = &s.slot_gate[first * F], .n = count};
    s.expert_jobs[jobs++] = {
        .w = w.up, .x = &s.slot_x[first * H], .y = &s.slot_up[first * F], .n = count};
  }
  kernels::matmul_grouped(pool_, s.expert_jobs.data(), jobs);
  pool_.parallel_for(static_cast<size_t>(slots), [&](size_t begin, size_t end) {
    kernels::swiglu(&s.slot_gate[begin * F], &s.slot_up[begin * F], &s.slot_gate[begin * F],
                    (end - begin) * F);
  });
  jobs = 0;
  for (size_t e = 0; e < E; ++e) {
    const auto count = static_cast<size_t>(s.exp_count[e]);
    if (count == 0) continue;
    const auto first = static_cast<size_t>(s.exp_first[e]);
    // The expert's inputs are no longer needed: its outputs take their place.
    s.expert_jobs[jobs++] = {.w = s.exp_ptr[e]->down,
                             .x = &s.slot_gate[first * F],
                             .y = &s.slot_x[first * H],
                             .n = count};
  }
  kernels::matmul_grouped(pool_, s.expert_jobs.data(), jobs);
  pool_.parallel_for(tokens, [&](size_t begin, size_t end) {
    for (size_t t = begin; t < end; ++t) {
      for (size_t i = 0; i < K; ++i) {
        const auto slot = static_cast<size_t>(s.token_slots[t * K + i]);
        kernels::axpy(s.slot_weight[slot], &s.slot_x[slot * H], out + t * H, H);
      }
    }
  });
}

void CpuOps::delta_rule(const DeltaRuleSpec& spec, const DeltaRuleWeights& w, DeltaRuleState state,
                        float* qkv, const float* z, const float* b, const float* a, int n,
                        float* core) {
  if (params_.gdn_prefill == DeltaRulePrefill::kChunked && n > 1) {
    delta_rule_chunked(spec, w, state, qkv, z, b, a, n, core);
    return;
  }
  // Token by token (a batched prefill computes exactly what decoding does).
  const auto conv_dim = static_cast<size_t>(2 * spec.k_heads * spec.dk + spec.v_heads * spec.dv);
  const auto vd = static_cast<size_t>(spec.v_heads * spec.dv);
  const auto nv = static_cast<size_t>(spec.v_heads);
  for (size_t t = 0; t < static_cast<size_t>(n); ++t) {
    delta_rule_token(spec, w, state, qkv + t * conv_dim, z + t * vd, b + t * nv, a + t * nv,
                     core + t * vd);
  }
}

// The batched prefill in the chunked form: the conv and the q / k norms token by token (the
// conv state is a recurrence too, and cheap), then every value head's n steps in one
// kernels::delta_rule_chunked call over chunks of kDeltaRuleChunk tokens from the start of this
// call; heads split over the threads as in delta_rule_token, so the result does not depend on -t.
void CpuOps::delta_rule_chunked(const DeltaRuleSpec& spec, const DeltaRuleWeights& w,
                                DeltaRuleState state, float* qkv, const float* z, const float* b,
                                const float* a, int n, float* core) {
  const auto nk = static_cast<size_t>(spec.k_heads);
  const auto nv = static_cast<size_t>(spec.v_heads);
  const auto dk = static_cast<size_t>(spec.dk);
  const auto dv = static_cast<size_t>(spec.dv);
  const auto tokens = static_cast<size_t>(n);
  const size_t kd = nk * dk;
  const size_t r = nv / nk;
  const size_t conv_dim = 2 * kd + nv * dv;
  const size_t vd = nv * dv;
  delta_rule_inputs(spec, w, state, qkv, tokens);
  // g and beta of every token and head, [token][head] (grown on the first such call only).
  if (gates_.size() < 2 * tokens * nv) gates_.resize(2 * tokens * nv);
  float* g = gates_.data();
  float* beta = g + tokens * nv;
  for (size_t t = 0; t < tokens; ++t) {
    for (size_t h = 0; h < nv; ++h) {
      beta[t * nv + h] = sigmoid(b[t * nv + h]);
      g[t * nv + h] = w.a_neg[h] * kernels::softplus(a[t * nv + h] + w.dt_bias[h]);
    }
  }
  const kernels::DeltaRuleChunkParams p{.n = tokens,
                                        .dk = dk,
                                        .dv = dv,
                                        .chunk = static_cast<size_t>(kDeltaRuleChunk),
                                        .qk_stride = conv_dim,
                                        .v_stride = conv_dim,
                                        .out_stride = vd,
                                        .gate_stride = nv};
  pool_.parallel_for(nv, [&](size_t begin, size_t end) {
    for (size_t h = begin; h < end; ++h) {
      const size_t kh = spec.v_heads_tiled ? h % nk : h / r;
      kernels::delta_rule_chunked(state.recurrent + h * dk * dv, qkv + kh * dk, qkv + kd + kh * dk,
                                  qkv + 2 * kd + h * dv, g + h, beta + h, core + h * dv, p);
      for (size_t t = 0; t < tokens; ++t) {
        float* o = core + t * vd + h * dv;
        kernels::rmsnorm_gated(o, w.norm.data(), z + t * vd + h * dv, o, dv, spec.eps);
      }
    }
  });
}

// Conv + SiLU of n tokens' q, k, v channels (rows of conv_dim; state.conv advanced), then q and
// k L2-normalised per key head (eps 1e-6) and q /= sqrt(dk), in place. Both parts are split over
// the threads: the conv by blocks of channels (each channel's state is its own recurrence, run
// over the n tokens by one thread; the kernel works channel by channel, so any split gives the
// same bits), the norms by (token, head) vector.
void CpuOps::delta_rule_inputs(const DeltaRuleSpec& spec, const DeltaRuleWeights& w,
                               DeltaRuleState state, float* mixed, size_t n) {
  const auto nk = static_cast<size_t>(spec.k_heads);
  const auto nv = static_cast<size_t>(spec.v_heads);
  const auto dk = static_cast<size_t>(spec.dk);
  const auto dv = static_cast<size_t>(spec.dv);
  const size_t kd = nk * dk;
  const size_t conv_dim = 2 * kd + nv * dv;
  const auto width = static_cast<size_t>(spec.conv_kernel);
  constexpr size_t kChannelBlock = 256;
  pool_.parallel_for((conv_dim + kChannelBlock - 1) / kChannelBlock, [&](size_t b0, size_t b1) {
    const size_t c0 = b0 * kChannelBlock;
    const size_t c1 = std::min(conv_dim, b1 * kChannelBlock);
    for (size_t t = 0; t < n; ++t) {
      float* x = mixed + t * conv_dim + c0;
      kernels::conv1d_silu_step(state.conv + c0 * (width - 1), x, w.conv.data() + c0 * width,
                                c1 - c0, width, x);
    }
  });
  const auto sqrt_dk = static_cast<float>(std::sqrt(static_cast<double>(dk)));  // query / dk**0.5
  // Vectors 0 .. nk-1 of a token are its q heads, nk .. 2nk-1 its k heads (contiguous).
  pool_.parallel_for(n * 2 * nk, [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) {
      const size_t head = i % (2 * nk);
      float* x = mixed + (i / (2 * nk)) * conv_dim + head * dk;
      kernels::l2norm(x, dk, 1e-6f);
      if (head < nk)
        for (size_t j = 0; j < dk; ++j) x[j] = x[j] / sqrt_dk;
    }
  });
}

// One token (transformers' torch_recurrent_gated_delta_rule order, fp32): conv + SiLU, q and k
// L2-normalised per key head (eps 1e-6), q /= sqrt(dk); per value head beta = sigmoid(b),
// g = -exp(A_log) * softplus(a + dt_bias), the delta-rule step, then the gated RMSNorm.
void CpuOps::delta_rule_token(const DeltaRuleSpec& spec, const DeltaRuleWeights& w,
                              DeltaRuleState state, float* mixed, const float* z, const float* b,
                              const float* a, float* core) {
  const auto nk = static_cast<size_t>(spec.k_heads);
  const auto nv = static_cast<size_t>(spec.v_heads);
  const auto dk = static_cast<size_t>(spec.dk);
  const auto dv = static_cast<size_t>(spec.dv);
  const size_t kd = nk * dk;
  const size_t r = nv / nk;
  delta_rule_inputs(spec, w, state, mixed, 1);
  const float* q = mixed;
  const float* k = mixed + kd;
  const float* v = mixed + 2 * kd;
  // Value heads are independent (own state, own output; q and k only read): split over the
  // threads, each head computed whole by one of them, so the result does not depend on -t.
  pool_.parallel_for(nv, [&](size_t begin, size_t end) {
    for (size_t h = begin; h < end; ++h) {
      const size_t kh = spec.v_heads_tiled ? h % nk : h / r;
      const float beta = sigmoid(b[h]);
      const float g = w.a_neg[h] * kernels::softplus(a[h] + w.dt_bias[h]);
      float* o = core + h * dv;
      kernels::delta_rule_step(state.recurrent + h * dk * dv, q + kh * dk, k + kh * dk, v + h * dv,
                               g, beta, dk, dv, o);
      kernels::rmsnorm_gated(o, w.norm.data(), z + h * dv, o, dv, spec.eps);
    }
  });
}

}  // namespace steermoe::engine
