// The CUDA compute backend (see cuda_backend_factory.hpp and README.md here). Host code only: it
// calls the CUDA runtime and the kernels of kernels/cuda/forward_cuda.hpp; every launch goes to
// one compute stream, and a layer synchronises the host once, for its router scores.
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "common/error.hpp"
#include "engine/router_scores.hpp"
#include "engine/cuda_backend_factory.hpp"
#include "kernels/cuda/forward_cuda.hpp"

namespace steermoe::engine {
namespace {

namespace kc = kernels::cuda;
using model::Family;
using model::QkNorm;

void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) fail("cuda", what, "expected success, found {}", cudaGetErrorString(err));
}
void check_launch(int err, const char* what) {
  check(static_cast<cudaError_t>(err), what);
}

kc::WType wtype(kernels::DType d) {
  switch (d) {
    case kernels::DType::kBF16:
      return kc::WType::kBF16;
    case kernels::DType::kF16:
      return kc::WType::kF16;
    case kernels::DType::kF32:
      return kc::WType::kF32;
    default:
      break;
  }
  fail("--backend cuda", "weights",
       "expected F32, F16 or BF16 matrices (the CUDA backend has no quantized kernels yet), found "
       "{}",
       kernels::dtype_name(d));
}

size_t matrix_bytes(const kernels::Matrix& m) {
  return m.data == nullptr ? 0 : kernels::stored_bytes(m);
}
size_t swiglu_bytes(const model::SwigluWeights& w) {
  return matrix_bytes(w.gate) + matrix_bytes(w.up) + matrix_bytes(w.down);
}

double gib(size_t b) {
  return static_cast<double>(b) / (1024.0 * 1024.0 * 1024.0);
}


struct DSwiglu {
  kc::DMatrix gate, up, down;
  bool present() const { return gate.data != nullptr; }
};

struct DLayer {
  const float* attn_norm = nullptr;
  const float* ffn_norm = nullptr;
  kc::DMatrix wq, wk, wv, wo;
  const float* q_norm = nullptr;
  const float* k_norm = nullptr;
  kc::DMatrix q_a, q_b, kv_a, kv_b;
  const float* q_a_norm = nullptr;
  const float* kv_a_norm = nullptr;
  kc::DMatrix router;
  DSwiglu shared, dense;
};

class CudaBackend final : public ComputeBackend {
 public:
  CudaBackend(const model::Model& model, const CudaBackendParams& params);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  void embed(std::span<const int32_t> tokens) override;
  void attention(int layer, int n, int pos) override;
  RouterScores router(int layer, int next_moe_layer, int n) override;
  void moe(int layer, int n, std::span<const ExpertCall> calls) override;
  void dense_ffn(int layer, int n) override;
  void head(int n, std::span<float> all_logits) override;
  std::span<const float> logits() const override { return {h_logits_, vocab_}; }
  int threads() const override { return 1; }

 private:
  template <typename T>
  T* alloc(size_t count) {
    void* p = nullptr;
    check(cudaMalloc(&p, std::max<size_t>(count, 1) * sizeof(T)), "cudaMalloc");
    allocations_.push_back(p);
    return static_cast<T*>(p);
  }
  const float* upload(const std::vector<float>& v);
  kc::DMatrix upload(const kernels::Matrix& m);
  kc::DMatrix into(const kernels::Matrix& m, void* dst);  // copy into given device memory
  DSwiglu upload(const model::SwigluWeights& w);
  void product(const kc::DMatrix& w, const float* x, int n, float* y);
  void swiglu_block(const DSwiglu& w, const float* in, int n, float* out);
  void attention_gqa(int l, int n, int pos0);
  void attention_mla(int l, int n, int pos0);
  kc::MoeExpert device_expert(int layer, int m, const ExpertCall& call);

  const model::Model& model_;
  const model::ModelConfig& cfg_;
  CudaBackendParams params_;
  size_t vocab_ = 0;
  cudaStream_t stream_ = nullptr;
  std::vector<void*> allocations_;
  std::vector<DLayer> layers_;
  std::vector<int> moe_index_;  // [layers] -> MoE index or -1
  const float* final_norm_ = nullptr;
  kc::DMatrix lm_head_;

  // Experts: uploaded [moe layer][expert], or device slots [moe layer][C] filled on demand.
  std::vector<std::vector<kc::MoeExpert>> resident_;
  std::vector<void*> slot_mem_;              // [L * C]
  std::vector<int32_t> slot_expert_;         // [L * C] expert held (-1 none)
  std::vector<const void*> slot_source_;     // [L * C] host gate pointer it was copied from
  std::vector<kc::MoeExpert> call_experts_;  // [B * K] host staging of the call array
  kc::MoeExpert* h_calls_ = nullptr;         // pinned [B * K]
  kc::MoeExpert* d_calls_ = nullptr;         // device [B * K]
  kc::WType expert_dtype_ = kc::WType::kF32;
  size_t expert_bytes_ = 0;
  int64_t expert_copies_ = 0;

  // Activations.
  float* d_x_ = nullptr;        // [B][H]
  float* d_a_ = nullptr;        // [B][H]
  float* d_q_ = nullptr;        // [B][heads * qk]
  float* d_k_ = nullptr;        // [B][kvh * qk] or [B][lora]
  float* d_v_ = nullptr;        // [B][kvh * vd]
  float* d_qa_ = nullptr;       // [B][q_lora]
  float* d_ckv_ = nullptr;      // [B][lora + rope]
  float* d_kvb_ = nullptr;      // [B][heads * (nope + vd)]
  float* d_attn_ = nullptr;     // [B][heads * vd]
  float* d_o_ = nullptr;        // [B][H]
  float* d_gate_ = nullptr;     // [B][ffn_max]
  float* d_up_ = nullptr;       // [B][ffn_max]
  float* d_sh_ = nullptr;       // [B][H]
  float* d_h_ = nullptr;        // [K][expert_ffn]
  float* d_rl_ = nullptr;       // [2][B][E] router logits (this layer, next layer)
  float* d_scratch_ = nullptr;  // [B][heads][context]
  float* d_logits_ = nullptr;   // [B][V]
  float* d_kc_ = nullptr;       // [layers][context][kvh * qk]
  float* d_vc_ = nullptr;       // [layers][context][kvh * vd]
  size_t k_row_ = 0, v_row_ = 0;

  // Host-visible (pinned) buffers.
  float* h_x_ = nullptr;       // [B][H] embeddings
  float* h_rl_ = nullptr;      // [2][B][E]
  float* h_logits_ = nullptr;  // [V]
  std::vector<float> z_, ws_, pre_, pre_ws_;
};

CudaBackend::CudaBackend(const model::Model& model, const CudaBackendParams& params)
    : model_(model), cfg_(model.config()), params_(params) {
  check(cudaSetDevice(params.device), "cudaSetDevice");
  check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  const auto B = static_cast<size_t>(params.max_batch);
  const auto H = static_cast<size_t>(cfg_.hidden);
  const auto E = static_cast<size_t>(cfg_.experts);
  const auto K = static_cast<size_t>(cfg_.top_k);
  const auto heads = static_cast<size_t>(cfg_.heads);
  const auto ctx = static_cast<size_t>(params.context);
  const bool mla = cfg_.family == Family::kDeepseekV3;
  const auto qk = static_cast<size_t>(cfg_.q_head_dim());
  const auto vd = static_cast<size_t>(cfg_.v_dim());
  const size_t kvh = mla ? heads : static_cast<size_t>(cfg_.kv_heads);
  vocab_ = static_cast<size_t>(cfg_.vocab);
  const size_t ffn_max =
      static_cast<size_t>(std::max({cfg_.expert_ffn, cfg_.shared_ffn, cfg_.dense_ffn, 1}));
  k_row_ = kvh * qk;
  v_row_ = kvh * vd;

  // What the model needs on the device, checked against free memory before any upload.
  size_t weights = matrix_bytes(model.lm_head()) + H * sizeof(float);
  size_t experts = 0;
  for (int l = 0; l < cfg_.layers; ++l) {
    const model::LayerWeights& w = model.layer(l);
    for (const kernels::Matrix* m :
         {&w.wq, &w.wk, &w.wv, &w.wo, &w.q_a, &w.q_b, &w.kv_a, &w.kv_b, &w.router})
      weights += matrix_bytes(*m);
    weights += swiglu_bytes(w.shared) + swiglu_bytes(w.dense);
    if (w.moe && !w.experts.empty()) {
      expert_bytes_ = std::max(expert_bytes_, swiglu_bytes(w.experts[0]));
      if (params.upload_experts)
        for (const model::SwigluWeights& e : w.experts) experts += swiglu_bytes(e);
    }
  }
  const int moe_layers = cfg_.moe_layer_count();
  if (params.experts_on_device) {
    experts = 0;  // the cuda link allocated (and checked) its device slots
  } else if (!params.upload_experts) {
    experts =
        static_cast<size_t>(moe_layers) * static_cast<size_t>(params.cache_slots) * expert_bytes_;
  }
  const size_t lora = mla ? static_cast<size_t>(cfg_.mla.kv_lora_rank) : 0;
  const size_t rope_dim = mla ? static_cast<size_t>(cfg_.mla.qk_rope_head_dim) : 0;
  const size_t nope = mla ? static_cast<size_t>(cfg_.mla.qk_nope_head_dim) : 0;
  const size_t kv_bytes = static_cast<size_t>(cfg_.layers) * ctx * (k_row_ + v_row_) * 4;
  const size_t act = 4 * (B * H * 4 + B * heads * qk + B * std::max(k_row_, lora) + B * v_row_ +
                          B * (lora + rope_dim) + B * heads * (nope + vd) + B * heads * vd +
                          2 * B * ffn_max + K * ffn_max + 2 * B * E + B * heads * ctx + B * vocab_);
  size_t free_b = 0, total_b = 0;
  check(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
  const size_t need = weights + experts + kv_bytes + act + (256u << 20);  // + runtime margin
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, params.device), "cudaGetDeviceProperties");
  if (!params.quiet) {
    std::fprintf(stderr,
                 "cuda: %s (sm_%d%d), %.1f GiB device memory, %.1f GiB free; needs %.2f GiB "
                 "(weights %.2f, experts %.2f %s, KV %.2f, activations %.2f)\n",
                 prop.name, prop.major, prop.minor, gib(total_b), gib(free_b), gib(need),
                 gib(weights), gib(experts),
                 params.upload_experts      ? "all resident"
                 : params.experts_on_device ? "in cuda link slots, counted there"
                                            : "in device slots",
                 gib(kv_bytes), gib(act));
  }
  if (need > free_b) {
    fail(model.path().string(), "device memory",
         "expected the model to fit on {} at this residency ({:.2f} GiB: weights {:.2f}, experts "
         "{:.2f}, KV cache {:.2f}), found {:.2f} GiB free; lower --residency with an offloading "
         "--link, or -c",
         prop.name, gib(need), gib(weights), gib(experts), gib(kv_bytes), gib(free_b));
  }

  // Non-expert weights.
  layers_.resize(static_cast<size_t>(cfg_.layers));
  for (int l = 0; l < cfg_.layers; ++l) {
    const model::LayerWeights& w = model.layer(l);
    DLayer& d = layers_[static_cast<size_t>(l)];
    d.attn_norm = upload(w.attn_norm);
    d.ffn_norm = upload(w.ffn_norm);
    d.wq = upload(w.wq);
    d.wk = upload(w.wk);
    d.wv = upload(w.wv);
    d.wo = upload(w.wo);
    d.q_norm = w.q_norm.empty() ? nullptr : upload(w.q_norm);
    d.k_norm = w.k_norm.empty() ? nullptr : upload(w.k_norm);
    d.q_a = upload(w.q_a);
    d.q_b = upload(w.q_b);
    d.kv_a = upload(w.kv_a);
    d.kv_b = upload(w.kv_b);
    d.q_a_norm = w.q_a_norm.empty() ? nullptr : upload(w.q_a_norm);
    d.kv_a_norm = w.kv_a_norm.empty() ? nullptr : upload(w.kv_a_norm);
    d.router = upload(w.router);
    d.shared = upload(w.shared);
    d.dense = upload(w.dense);
  }
  final_norm_ = upload(model.final_norm());
  lm_head_ = upload(model.lm_head());

  // Experts.
  moe_index_ = cfg_.moe_index();
  const std::vector<int>& moe_index = moe_index_;
  resident_.resize(static_cast<size_t>(moe_layers));
  bool dtype_set = false;
  for (int l = 0; l < cfg_.layers; ++l) {
    const int m = moe_index[static_cast<size_t>(l)];
    if (m < 0) continue;
    const model::LayerWeights& w = model.layer(l);
    for (const model::SwigluWeights& e : w.experts) {
      if (!dtype_set) {
        expert_dtype_ = wtype(e.gate.dtype);
        dtype_set = true;
      }
      if (wtype(e.gate.dtype) != expert_dtype_ || wtype(e.up.dtype) != expert_dtype_ ||
          wtype(e.down.dtype) != expert_dtype_)
        fail(model.path().string(), "experts",
             "expected every expert matrix in one dtype for the CUDA backend, found a mix");
    }
    if (!params.upload_experts) continue;
    auto& row = resident_[static_cast<size_t>(m)];
    row.reserve(w.experts.size());
    for (const model::SwigluWeights& e : w.experts) {
      const DSwiglu d = upload(e);
      row.push_back({.gate = d.gate.data, .up = d.up.data, .down = d.down.data, .weight = 0.0f});
    }
  }
  if (!params.upload_experts && !params.experts_on_device) {
    const size_t slots = static_cast<size_t>(moe_layers) * static_cast<size_t>(params.cache_slots);
    slot_mem_.resize(slots);
    for (void*& p : slot_mem_) p = alloc<uint8_t>(expert_bytes_);
    slot_expert_.assign(slots, -1);
    slot_source_.assign(slots, nullptr);
  }

  d_x_ = alloc<float>(B * H);
  d_a_ = alloc<float>(B * H);
  d_q_ = alloc<float>(B * heads * qk);
  d_k_ = alloc<float>(B * std::max(k_row_, lora));
  d_v_ = alloc<float>(B * v_row_);
  d_qa_ = alloc<float>(B * static_cast<size_t>(std::max(mla ? cfg_.mla.q_lora_rank : 0, 1)));
  d_ckv_ = alloc<float>(B * (lora + rope_dim));
  d_kvb_ = alloc<float>(B * heads * (nope + vd));
  d_attn_ = alloc<float>(B * heads * vd);
  d_o_ = alloc<float>(B * H);
  d_gate_ = alloc<float>(B * ffn_max);
  d_up_ = alloc<float>(B * ffn_max);
  d_sh_ = alloc<float>(B * H);
  d_h_ = alloc<float>(K * ffn_max);
  d_rl_ = alloc<float>(2 * B * E);
  d_scratch_ = alloc<float>(B * heads * ctx);
  d_logits_ = alloc<float>(B * vocab_);
  d_kc_ = alloc<float>(static_cast<size_t>(cfg_.layers) * ctx * k_row_);
  d_vc_ = alloc<float>(static_cast<size_t>(cfg_.layers) * ctx * v_row_);
  d_calls_ = alloc<kc::MoeExpert>(B * K);
  check(cudaMemsetAsync(d_kc_, 0, static_cast<size_t>(cfg_.layers) * ctx * k_row_ * 4, stream_),
        "cudaMemset");
  check(cudaMemsetAsync(d_vc_, 0, static_cast<size_t>(cfg_.layers) * ctx * v_row_ * 4, stream_),
        "cudaMemset");
  check(cudaHostAlloc(reinterpret_cast<void**>(&h_x_), B * H * 4, cudaHostAllocDefault),
        "cudaHostAlloc");
  check(cudaHostAlloc(reinterpret_cast<void**>(&h_rl_), 2 * B * E * 4, cudaHostAllocDefault),
        "cudaHostAlloc");
  check(cudaHostAlloc(reinterpret_cast<void**>(&h_logits_), vocab_ * 4, cudaHostAllocDefault),
        "cudaHostAlloc");
  check(cudaHostAlloc(reinterpret_cast<void**>(&h_calls_), B * K * sizeof(kc::MoeExpert),
                      cudaHostAllocDefault),
        "cudaHostAlloc");
  std::fill_n(h_logits_, vocab_, 0.0f);
  z_.resize(B * E);
  ws_.resize(B * E);
  pre_.resize(B * E);
  pre_ws_.resize(E);
  check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
}

CudaBackend::~CudaBackend() {
  if (stream_ != nullptr) cudaStreamSynchronize(stream_);
  for (void* p : allocations_) cudaFree(p);
  for (void* p : {static_cast<void*>(h_x_), static_cast<void*>(h_rl_),
                  static_cast<void*>(h_logits_), static_cast<void*>(h_calls_)})
    if (p != nullptr) cudaFreeHost(p);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

const float* CudaBackend::upload(const std::vector<float>& v) {
  if (v.empty()) return nullptr;
  float* d = alloc<float>(v.size());
  check(cudaMemcpyAsync(d, v.data(), v.size() * 4, cudaMemcpyHostToDevice, stream_),
        "cudaMemcpyAsync");
  return d;
}

kc::DMatrix CudaBackend::into(const kernels::Matrix& m, void* dst) {
  const size_t es = kernels::dtype_size(m.dtype);
  // On the compute stream: a later kernel is ordered after the copy (a synchronous copy from
  // pageable memory may return before its DMA lands, and the compute stream is non-blocking).
  check(cudaMemcpy2DAsync(dst, m.cols * es, m.data, m.stride() * es, m.cols * es, m.rows,
                          cudaMemcpyHostToDevice, stream_),
        "cudaMemcpy2DAsync");
  return {.data = dst,
          .dtype = wtype(m.dtype),
          .rows = static_cast<int32_t>(m.rows),
          .cols = static_cast<int32_t>(m.cols),
          .stride = 0};
}

kc::DMatrix CudaBackend::upload(const kernels::Matrix& m) {
  if (m.data == nullptr) return {};
  return into(m, alloc<uint8_t>(matrix_bytes(m)));
}

DSwiglu CudaBackend::upload(const model::SwigluWeights& w) {
  if (!w.present()) return {};
  return {.gate = upload(w.gate), .up = upload(w.up), .down = upload(w.down)};
}

void CudaBackend::product(const kc::DMatrix& w, const float* x, int n, float* y) {
  check_launch(kc::matmul(w, x, 0, y, 0, n, 1.0f, false, stream_), "matmul");
}

void CudaBackend::embed(std::span<const int32_t> tokens) {
  const auto H = static_cast<size_t>(cfg_.hidden);
  // The previous block's copies out of h_x_ are complete: every forward ends with a host sync.
  for (size_t t = 0; t < tokens.size(); ++t) model_.embed(tokens[t], &h_x_[t * H]);
  check(cudaMemcpyAsync(d_x_, h_x_, tokens.size() * H * 4, cudaMemcpyHostToDevice, stream_),
        "cudaMemcpyAsync");
}

void CudaBackend::attention(int l, int n, int pos) {
  const DLayer& w = layers_[static_cast<size_t>(l)];
  const int H = cfg_.hidden;
  check_launch(kc::rmsnorm_rows(d_x_, 0, w.attn_norm, d_a_, 0, n, H, cfg_.rms_eps, stream_),
               "rmsnorm");
  if (cfg_.family == Family::kDeepseekV3) {
    attention_mla(l, n, pos);
  } else {
    attention_gqa(l, n, pos);
  }
  check_launch(kc::add(d_x_, d_o_, d_x_, static_cast<int64_t>(n) * H, stream_), "add");
  check_launch(kc::rmsnorm_rows(d_x_, 0, w.ffn_norm, d_a_, 0, n, H, cfg_.rms_eps, stream_),
               "rmsnorm");
}

void CudaBackend::attention_gqa(int l, int n, int pos0) {
  const DLayer& w = layers_[static_cast<size_t>(l)];
  const int hd = cfg_.head_dim;
  const int heads = cfg_.heads;
  const int kvh = cfg_.kv_heads;
  const int qw = heads * hd, kw = kvh * hd;
  product(w.wq, d_a_, n, d_q_);
  product(w.wk, d_a_, n, d_k_);
  product(w.wv, d_a_, n, d_v_);
  if (cfg_.qk_norm == QkNorm::kWholeProjection) {
    check_launch(kc::rmsnorm_rows(d_q_, 0, w.q_norm, d_q_, 0, n, qw, cfg_.rms_eps, stream_), "qn");
    check_launch(kc::rmsnorm_rows(d_k_, 0, w.k_norm, d_k_, 0, n, kw, cfg_.rms_eps, stream_), "kn");
  } else if (cfg_.qk_norm == QkNorm::kPerHead) {
    check_launch(kc::rmsnorm_rows(d_q_, 0, w.q_norm, d_q_, 0, n * heads, hd, cfg_.rms_eps, stream_),
                 "qn");
    check_launch(kc::rmsnorm_rows(d_k_, 0, w.k_norm, d_k_, 0, n * kvh, hd, cfg_.rms_eps, stream_),
                 "kn");
  }
  check_launch(kc::rope(d_q_, n, qw, heads, hd, 0, hd, pos0, cfg_.rope_theta, false, stream_),
               "rope");
  check_launch(kc::rope(d_k_, n, kw, kvh, hd, 0, hd, pos0, cfg_.rope_theta, false, stream_),
               "rope");
  const size_t ctx = static_cast<size_t>(params_.context);
  float* kc_l = d_kc_ + static_cast<size_t>(l) * ctx * k_row_;
  float* vc_l = d_vc_ + static_cast<size_t>(l) * ctx * v_row_;
  check(cudaMemcpyAsync(kc_l + static_cast<size_t>(pos0) * k_row_, d_k_,
                        static_cast<size_t>(n) * k_row_ * 4, cudaMemcpyDeviceToDevice, stream_),
        "cudaMemcpyAsync");
  check(cudaMemcpyAsync(vc_l + static_cast<size_t>(pos0) * v_row_, d_v_,
                        static_cast<size_t>(n) * v_row_ * 4, cudaMemcpyDeviceToDevice, stream_),
        "cudaMemcpyAsync");
  const kc::AttentionShape sh{
      .heads = heads, .kv_heads = kvh, .dk = hd, .dv = hd, .scale = cfg_.attention_scale()};
  check_launch(
      kc::attention(d_q_, kc_l, vc_l, d_attn_, d_scratch_, params_.context, n, pos0, sh, stream_),
      "attention");
  product(w.wo, d_attn_, n, d_o_);
}

void CudaBackend::attention_mla(int l, int n, int pos0) {
  const DLayer& w = layers_[static_cast<size_t>(l)];
  const model::MlaConfig& m = cfg_.mla;
  const int heads = cfg_.heads;
  const int nope = m.qk_nope_head_dim, rope_dim = m.qk_rope_head_dim, vd = m.v_head_dim;
  const int lora = m.kv_lora_rank;
  const int qk = nope + rope_dim;
  if (m.q_lora_rank > 0) {
    product(w.q_a, d_a_, n, d_qa_);
    check_launch(kc::rmsnorm_rows(d_qa_, 0, w.q_a_norm, d_qa_, 0, n, m.q_lora_rank, m.lora_norm_eps,
                                  stream_),
                 "rmsnorm");
    product(w.q_b, d_qa_, n, d_q_);
  } else {
    product(w.q_b, d_a_, n, d_q_);
  }
  product(w.kv_a, d_a_, n, d_ckv_);
  check_launch(kc::rmsnorm_rows(d_ckv_, lora + rope_dim, w.kv_a_norm, d_k_, lora, n, lora,
                                m.lora_norm_eps, stream_),
               "rmsnorm");
  product(w.kv_b, d_k_, n, d_kvb_);
  const bool inter = cfg_.rope == model::RopeKind::kInterleaved;
  check_launch(kc::rope(d_q_, n, static_cast<int64_t>(heads) * qk, heads, qk, nope, rope_dim, pos0,
                        cfg_.rope_theta, inter, stream_),
               "rope");
  check_launch(kc::rope(d_ckv_ + lora, n, lora + rope_dim, 1, rope_dim, 0, rope_dim, pos0,
                        cfg_.rope_theta, inter, stream_),
               "rope");
  const size_t ctx = static_cast<size_t>(params_.context);
  float* kc_l = d_kc_ + static_cast<size_t>(l) * ctx * k_row_;
  float* vc_l = d_vc_ + static_cast<size_t>(l) * ctx * v_row_;
  check_launch(kc::mla_scatter_kv(d_kvb_, d_ckv_ + lora, lora + rope_dim, kc_l, vc_l, n, pos0,
                                  heads, nope, rope_dim, vd, stream_),
               "mla_scatter_kv");
  const kc::AttentionShape sh{
      .heads = heads, .kv_heads = heads, .dk = qk, .dv = vd, .scale = cfg_.attention_scale()};
  check_launch(
      kc::attention(d_q_, kc_l, vc_l, d_attn_, d_scratch_, params_.context, n, pos0, sh, stream_),
      "attention");
  product(w.wo, d_attn_, n, d_o_);
}

void CudaBackend::swiglu_block(const DSwiglu& w, const float* in, int n, float* out) {
  product(w.gate, in, n, d_gate_);
  product(w.up, in, n, d_up_);
  check_launch(kc::swiglu(d_gate_, d_up_, d_gate_, static_cast<int64_t>(n) * w.gate.rows, stream_),
               "swiglu");
  product(w.down, d_gate_, n, out);
}

void CudaBackend::dense_ffn(int l, int n) {
  swiglu_block(layers_[static_cast<size_t>(l)].dense, d_a_, n, d_o_);
  check_launch(kc::add(d_x_, d_o_, d_x_, static_cast<int64_t>(n) * cfg_.hidden, stream_), "add");
}

RouterScores CudaBackend::router(int l, int next, int n) {
  const auto E = static_cast<size_t>(cfg_.experts);
  const auto B = static_cast<size_t>(params_.max_batch);
  const size_t rows = static_cast<size_t>(n) * E;
  product(layers_[static_cast<size_t>(l)].router, d_a_, n, d_rl_);
  check(cudaMemcpyAsync(h_rl_, d_rl_, rows * 4, cudaMemcpyDeviceToHost, stream_), "cudaMemcpy");
  if (next >= 0) {
    product(layers_[static_cast<size_t>(next)].router, d_a_, n, d_rl_ + B * E);
    check(cudaMemcpyAsync(h_rl_ + B * E, d_rl_ + B * E, rows * 4, cudaMemcpyDeviceToHost, stream_),
          "cudaMemcpy");
  }
  // The layer's one synchronisation: the policy needs the scores on the host.
  check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  const model::LayerWeights& w = model_.layer(l);
  for (int t = 0; t < n; ++t) {
    const size_t off = static_cast<size_t>(t) * E;
    router_scores(cfg_, w.router_bias, h_rl_ + off, &z_[off], &ws_[off]);
  }
  RouterScores out{.z = std::span<const float>(z_.data(), rows),
                   .weight_scores = std::span<const float>(ws_.data(), rows)};
  if (next >= 0) {
    const model::LayerWeights& wn = model_.layer(next);
    for (int t = 0; t < n; ++t) {
      const size_t off = static_cast<size_t>(t) * E;
      router_scores(cfg_, wn.router_bias, h_rl_ + B * E + off, &pre_[off], pre_ws_.data());
    }
    out.pregate_next = std::span<const float>(pre_.data(), rows);
  }
  return out;
}

// The device copy of the expert a call refers to: the uploaded one when the host store hands
// out the model's own weights, else device slot (m, call.slot), refilled from the host store's
// memory when it holds another expert.
kc::MoeExpert CudaBackend::device_expert(int layer, int m, const ExpertCall& call) {
  const auto e = static_cast<size_t>(call.expert);
  const model::LayerWeights& w = model_.layer(layer);
  if (params_.upload_experts && call.weights == &w.experts[e]) {
    kc::MoeExpert d = resident_[static_cast<size_t>(m)][e];
    d.weight = call.weight;
    return d;
  }
  SM_ASSERT_MSG(!params_.upload_experts, "expert store handed out weights not in the model");
  const model::SwigluWeights& src = *call.weights;
  if (params_.experts_on_device) {
    // The cuda link's device slots: the store's pointers are device addresses already.
    SM_ASSERT(src.gate.stride() == src.gate.cols && src.up.stride() == src.up.cols &&
              src.down.stride() == src.down.cols);
    return {.gate = src.gate.data, .up = src.up.data, .down = src.down.data, .weight = call.weight};
  }
  SM_ASSERT(call.slot >= 0 && call.slot < params_.cache_slots);
  const size_t idx = static_cast<size_t>(m) * static_cast<size_t>(params_.cache_slots) +
                     static_cast<size_t>(call.slot);
  auto* base = static_cast<uint8_t*>(slot_mem_[idx]);
  const size_t gb = matrix_bytes(src.gate), ub = matrix_bytes(src.up);
  if (slot_expert_[idx] != call.expert || slot_source_[idx] != src.gate.data) {
    (void)into(src.gate, base);
    (void)into(src.up, base + gb);
    (void)into(src.down, base + gb + ub);
    slot_expert_[idx] = call.expert;
    slot_source_[idx] = src.gate.data;
    ++expert_copies_;
  }
  return {.gate = base, .up = base + gb, .down = base + gb + ub, .weight = call.weight};
}

void CudaBackend::moe(int l, int n, std::span<const ExpertCall> calls) {
  const DLayer& w = layers_[static_cast<size_t>(l)];
  const int H = cfg_.hidden;
  SM_ASSERT(n >= 1 && calls.size() % static_cast<size_t>(n) == 0);
  const size_t K = calls.size() / static_cast<size_t>(n);
  SM_ASSERT(K <= static_cast<size_t>(cfg_.top_k));
  const int m = moe_index_[static_cast<size_t>(l)];
  for (size_t i = 0; i < calls.size(); ++i) h_calls_[i] = device_expert(l, m, calls[i]);
  check(cudaMemcpyAsync(d_calls_, h_calls_, calls.size() * sizeof(kc::MoeExpert),
                        cudaMemcpyHostToDevice, stream_),
        "cudaMemcpyAsync");
  for (int t = 0; t < n; ++t) {
    const size_t off = static_cast<size_t>(t) * static_cast<size_t>(H);
    check_launch(
        kc::moe_fused(d_calls_ + static_cast<size_t>(t) * K, static_cast<int>(K), expert_dtype_, H,
                      cfg_.expert_ffn, d_a_ + off, d_h_, d_o_ + off, false, stream_),
        "moe_fused");
  }
  if (w.shared.present()) {
    swiglu_block(w.shared, d_a_, n, d_sh_);
    check_launch(kc::add(d_o_, d_sh_, d_o_, static_cast<int64_t>(n) * H, stream_), "add");
  }
  check_launch(kc::add(d_x_, d_o_, d_x_, static_cast<int64_t>(n) * H, stream_), "add");
  // h_calls_ is rewritten by the next layer: its copy must have been read.
  check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
}

void CudaBackend::head(int n, std::span<float> all_logits) {
  const int H = cfg_.hidden;
  check_launch(kc::rmsnorm_rows(d_x_, 0, final_norm_, d_x_, 0, n, H, cfg_.rms_eps, stream_),
               "rmsnorm");
  if (!all_logits.empty()) {
    product(lm_head_, d_x_, n, d_logits_);
    check(cudaMemcpyAsync(all_logits.data(), d_logits_, static_cast<size_t>(n) * vocab_ * 4,
                          cudaMemcpyDeviceToHost, stream_),
          "cudaMemcpyAsync");
    check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    std::memcpy(h_logits_, all_logits.data() + static_cast<size_t>(n - 1) * vocab_, vocab_ * 4);
  } else {
    product(lm_head_, d_x_ + static_cast<size_t>(n - 1) * static_cast<size_t>(H), 1, d_logits_);
    check(cudaMemcpyAsync(h_logits_, d_logits_, vocab_ * 4, cudaMemcpyDeviceToHost, stream_),
          "cudaMemcpyAsync");
    check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }
}

}  // namespace

bool cuda_backend_available(std::string* why) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    if (why != nullptr)
      *why = err != cudaSuccess ? fmt::format("no usable CUDA device ({})", cudaGetErrorString(err))
                                : std::string("no CUDA device present");
    return false;
  }
  return true;
}

std::string cuda_device_summary() {
  std::string why;
  if (!cuda_backend_available(&why)) return why;
  int dev = 0;
  cudaGetDevice(&dev);
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, dev);
  size_t free_b = 0, total_b = 0;
  cudaMemGetInfo(&free_b, &total_b);
  return fmt::format("{} (sm_{}{}), {:.1f} GiB device memory, {:.1f} GiB free", prop.name,
                     prop.major, prop.minor, gib(total_b), gib(free_b));
}

// What the CUDA backend does not implement (yet), or empty: such models are an error, never a
// silently different forward pass.
std::string unsupported(const model::ModelConfig& c) {
  if (c.family == Family::kQwen3Next || c.family == Family::kQwen35Moe || !c.linear_layer.empty())
    return "a hybrid model (Gated DeltaNet layers)";
  if (c.rope_scaling.kind != model::RopeScalingKind::kNone) return "RoPE scaling (YaRN)";
  if (c.family != Family::kDeepseekV3 && c.rope_dim != 0 && c.rope_dim != c.head_dim)
    return "partial rotary embeddings";
  if (c.clip_qkv != 0.0f) return "clip_qkv";
  if (c.attn_output_gate) return "gated attention output";
  if (c.shared_expert_gate) return "a gated shared expert";
  return "";
}

std::unique_ptr<ComputeBackend> make_cuda_backend(const model::Model& model,
                                                  const CudaBackendParams& params) {
  if (const std::string u = unsupported(model.config()); !u.empty())
    fail(model.path().string(), "architecture",
         "expected a model the CUDA backend implements (OLMoE, Qwen3-MoE, DeepSeek-V3 without "
         "RoPE scaling), found {}; use --backend cpu",
         u);
  std::string why;
  if (!cuda_backend_available(&why))
    fail("--backend", "cuda", "expected a usable CUDA backend, found {}", why);
  if (!params.upload_experts && params.cache_slots < 1)
    fail("--backend", "cuda", "expected >= 1 device slot per MoE layer, found {}",
         params.cache_slots);
  return std::make_unique<CudaBackend>(model, params);
}

}  // namespace steermoe::engine
