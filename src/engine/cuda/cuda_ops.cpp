// The op set (engine/ops.hpp) on a CUDA device: host code calling the CUDA runtime and the
// kernels of kernels/cuda/forward_cuda.hpp, every launch on one compute stream. Weights are
// uploaded by prepare() and found again by their host address; experts that were not prepared
// are the `cuda` link's device slots or are copied into this backend's own device slots.
#include <cuda_runtime.h>

#include <algorithm>
#include <unordered_map>
#include <vector>

#include "common/error.hpp"
#include "engine/cuda/cuda_util.hpp"
#include "engine/cuda_backend_factory.hpp"
#include "kernels/cuda/forward_cuda.hpp"

namespace steermoe::engine {
namespace {

namespace kc = kernels::cuda;

class CudaOps final : public Ops {
 public:
  explicit CudaOps(const CudaOpsParams& params);
  ~CudaOps() override;
  CudaOps(const CudaOps&) = delete;
  CudaOps& operator=(const CudaOps&) = delete;

  bool host_memory() const override { return false; }
  float* alloc(size_t count) override;
  float* alloc_host(size_t count) override;
  void alloc_kv(int layers, int positions, size_t k_width, size_t v_width,
                const std::vector<uint8_t>& skip) override;
  float* kv_keys(int layer) override { return kv_k_[static_cast<size_t>(layer)]; }
  float* kv_values(int layer) override { return kv_v_[static_cast<size_t>(layer)]; }
  void prepare(const kernels::Matrix& w) override;
  void prepare(std::span<const float> v) override;

  void upload(float* dst, const float* host, size_t count) override;
  void download(float* host, const float* src, size_t count) override;
  void sync() override { check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"); }
  int threads() const override { return 1; }

  void matmul(std::span<const Product> products, int n) override;
  void rmsnorm(const float* x, int64_t x_stride, std::span<const float> w, float* out,
               int64_t out_stride, int rows, int dim, float eps) override;
  void rope(float* x, int n, int64_t token_stride, int heads, int pos0,
            const RopeSpec& spec) override;
  void attention(const float* q, const float* k_cache, const float* v_cache, float* out, int n,
                 int pos0, const AttentionSpec& spec) override;
  void swiglu(const float* gate, const float* up, float* out, int64_t count) override {
    check_launch(kc::swiglu(gate, up, out, count, stream_), "swiglu");
  }
  void add(const float* a, const float* b, float* out, int64_t count) override {
    check_launch(kc::add(a, b, out, count, stream_), "add");
  }
  void clamp(float* x, int64_t count, float limit) override {
    check_launch(kc::clamp(x, count, limit, stream_), "clamp");
  }
  void sigmoid_mul(float* x, const float* gate, int64_t count) override {
    check_launch(kc::sigmoid_mul(x, gate, count, stream_), "sigmoid_mul");
  }
  void sigmoid_dot_scale(float* x, const float* a, std::span<const float> w, int rows,
                         int dim) override {
    check_launch(kc::sigmoid_dot_scale(x, a, device(w), rows, dim, stream_), "sigmoid_dot_scale");
  }
  void copy(const float* src, float* dst, const CopySpec& c) override;
  void zero(float* x, size_t count) override {
    check(cudaMemsetAsync(x, 0, count * sizeof(float), stream_), "cudaMemsetAsync");
  }
  void moe(int layer, const float* x, int n, std::span<const ExpertCall> calls,
           float* out) override;
  void delta_rule(const DeltaRuleSpec& spec, const DeltaRuleWeights& w, DeltaRuleState state,
                  float* qkv, const float* z, const float* b, const float* a, int n,
                  float* core) override;

 private:
  template <typename T>
  T* device_alloc(size_t count) {
    void* p = nullptr;
    check(cudaMalloc(&p, std::max<size_t>(count, 1) * sizeof(T)), "cudaMalloc");
    allocations_.push_back(p);
    check(cudaMemsetAsync(p, 0, std::max<size_t>(count, 1) * sizeof(T), stream_),
          "cudaMemsetAsync");
    return static_cast<T*>(p);
  }
  kc::DMatrix into(const kernels::Matrix& m, void* dst);  // copy into given device memory
  kc::DMatrix device(const kernels::Matrix& w) const;
  const float* device(std::span<const float> v) const;
  kc::MoeExpert device_expert(int layer, const ExpertCall& call);

  CudaOpsParams p_;
  cudaStream_t stream_ = nullptr;
  std::vector<void*> allocations_;
  std::vector<void*> host_allocations_;
  std::unordered_map<const void*, kc::DMatrix> matrices_;  // host data -> device copy
  std::unordered_map<const float*, const float*> vectors_;
  std::vector<float*> kv_k_, kv_v_;
  float* scratch_ = nullptr;          // attention: [B][heads][context]
  float* d_h_ = nullptr;              // MoE: [K][expert_ffn]
  kc::MoeExpert* h_calls_ = nullptr;  // pinned [B * K]
  kc::MoeExpert* d_calls_ = nullptr;  // device [B * K]
  // Own device slots [moe layer * C + slot]: memory, the expert held (-1 none), and the host
  // gate pointer it was copied from.
  std::vector<void*> slot_mem_;
  std::vector<int32_t> slot_expert_;
  std::vector<const void*> slot_source_;
};

CudaOps::CudaOps(const CudaOpsParams& params) : p_(params) {
  check(cudaSetDevice(params.device), "cudaSetDevice");
  check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  const auto B = static_cast<size_t>(std::max(1, params.max_batch));
  const auto K = static_cast<size_t>(std::max(1, params.top_k));
  scratch_ = device_alloc<float>(B * static_cast<size_t>(params.max_heads) *
                                 static_cast<size_t>(params.context));
  d_h_ = device_alloc<float>(K * static_cast<size_t>(std::max(1, params.expert_ffn)));
  d_calls_ = device_alloc<kc::MoeExpert>(B * K);
  check(cudaHostAlloc(reinterpret_cast<void**>(&h_calls_), B * K * sizeof(kc::MoeExpert),
                      cudaHostAllocDefault),
        "cudaHostAlloc");
  host_allocations_.push_back(h_calls_);
  int moe_layers = 0;
  for (int m : params.moe_index) moe_layers = std::max(moe_layers, m + 1);
  const size_t slots = static_cast<size_t>(moe_layers) * static_cast<size_t>(params.cache_slots);
  slot_mem_.resize(slots);
  for (void*& s : slot_mem_) s = device_alloc<uint8_t>(params.expert_bytes);
  slot_expert_.assign(slots, -1);
  slot_source_.assign(slots, nullptr);
}

CudaOps::~CudaOps() {
  if (stream_ != nullptr) cudaStreamSynchronize(stream_);
  for (void* p : allocations_) cudaFree(p);
  for (void* p : host_allocations_) cudaFreeHost(p);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

float* CudaOps::alloc(size_t count) {
  return device_alloc<float>(count);
}

float* CudaOps::alloc_host(size_t count) {
  void* p = nullptr;
  const size_t bytes = std::max<size_t>(count, 1) * sizeof(float);
  check(cudaHostAlloc(&p, bytes, cudaHostAllocDefault), "cudaHostAlloc");
  host_allocations_.push_back(p);
  std::fill_n(static_cast<float*>(p), std::max<size_t>(count, 1), 0.0f);
  return static_cast<float*>(p);
}

void CudaOps::alloc_kv(int layers, int positions, size_t k_width, size_t v_width,
                       const std::vector<uint8_t>& skip) {
  kv_k_.assign(static_cast<size_t>(layers), nullptr);
  kv_v_.assign(static_cast<size_t>(layers), nullptr);
  const auto pos = static_cast<size_t>(positions);
  for (int l = 0; l < layers; ++l) {
    if (!skip.empty() && skip[static_cast<size_t>(l)] != 0) continue;
    kv_k_[static_cast<size_t>(l)] = device_alloc<float>(pos * k_width);
    kv_v_[static_cast<size_t>(l)] = device_alloc<float>(pos * v_width);
  }
}

kc::DMatrix CudaOps::into(const kernels::Matrix& m, void* dst) {
  const size_t es = kernels::dtype_size(m.dtype);
  // On the compute stream: a later kernel is ordered after the copy (a synchronous copy from
  // pageable memory may return before its DMA lands, and the compute stream is non-blocking).
  check(cudaMemcpy2DAsync(dst, m.cols * es, m.data, m.stride() * es, m.cols * es, m.rows,
                          cudaMemcpyHostToDevice, stream_),
        "cudaMemcpy2DAsync");
  return {.data = dst,
          .dtype = weight_type(m.dtype),
          .rows = static_cast<int32_t>(m.rows),
          .cols = static_cast<int32_t>(m.cols),
          .stride = 0};
}

void CudaOps::prepare(const kernels::Matrix& w) {
  if (w.data == nullptr || matrices_.contains(w.data)) return;
  (void)weight_type(w.dtype);  // a clear error before any allocation
  matrices_[w.data] = into(w, device_alloc<uint8_t>(kernels::stored_bytes(w)));
}

void CudaOps::prepare(std::span<const float> v) {
  if (v.empty() || vectors_.contains(v.data())) return;
  float* d = device_alloc<float>(v.size());
  upload(d, v.data(), v.size());
  vectors_[v.data()] = d;
}

kc::DMatrix CudaOps::device(const kernels::Matrix& w) const {
  const auto it = matrices_.find(w.data);
  SM_ASSERT_MSG(it != matrices_.end(), "a weight matrix was used before prepare()");
  SM_ASSERT(it->second.rows == static_cast<int32_t>(w.rows) &&
            it->second.cols == static_cast<int32_t>(w.cols));
  return it->second;
}

const float* CudaOps::device(std::span<const float> v) const {
  if (v.empty()) return nullptr;
  const auto it = vectors_.find(v.data());
  SM_ASSERT_MSG(it != vectors_.end(), "a weight vector was used before prepare()");
  return it->second;
}

void CudaOps::upload(float* dst, const float* host, size_t count) {
  check(cudaMemcpyAsync(dst, host, count * sizeof(float), cudaMemcpyHostToDevice, stream_),
        "cudaMemcpyAsync");
}

void CudaOps::download(float* host, const float* src, size_t count) {
  check(cudaMemcpyAsync(host, src, count * sizeof(float), cudaMemcpyDeviceToHost, stream_),
        "cudaMemcpyAsync");
}

void CudaOps::matmul(std::span<const Product> products, int n) {
  for (const Product& p : products)
    check_launch(kc::matmul(device(*p.w), p.x, 0, p.y, 0, n, 1.0f, false, stream_), "matmul");
}

void CudaOps::rmsnorm(const float* x, int64_t x_stride, std::span<const float> w, float* out,
                      int64_t out_stride, int rows, int dim, float eps) {
  check_launch(kc::rmsnorm_rows(x, x_stride, device(w), out, out_stride, rows, dim, eps, stream_),
               "rmsnorm");
}

void CudaOps::rope(float* x, int n, int64_t token_stride, int heads, int pos0,
                   const RopeSpec& spec) {
  check_launch(
      kc::rope_scaled(x, n, token_stride, heads, spec.head_stride, spec.rot_offset, spec.rot_dim,
                      pos0, spec.theta, spec.style == kernels::RopeStyle::kInterleaved,
                      spec.inv_freq, spec.attention_factor, stream_),
      "rope");
}

void CudaOps::attention(const float* q, const float* k_cache, const float* v_cache, float* out,
                        int n, int pos0, const AttentionSpec& spec) {
  SM_ASSERT(n <= p_.max_batch && spec.heads <= p_.max_heads);
  const kc::AttentionShape sh{.heads = spec.heads,
                              .kv_heads = spec.kv_heads,
                              .dk = spec.dk,
                              .dv = spec.dv,
                              .scale = spec.scale};
  check_launch(kc::attention(q, k_cache, v_cache, out, scratch_, p_.context, n, pos0, sh, stream_),
               "attention");
}

void CudaOps::copy(const float* src, float* dst, const CopySpec& c) {
  const kc::CopyShape sh{.outer = c.outer,
                         .rows = c.rows,
                         .cols = c.cols,
                         .src_outer = c.src_outer,
                         .src_row = c.src_row,
                         .dst_outer = c.dst_outer,
                         .dst_row = c.dst_row};
  check_launch(kc::copy(src, dst, sh, stream_), "copy");
}

// The device copy of the expert a call refers to: the prepared one, the `cuda` link's device
// slot, or device slot (MoE layer, call.slot), refilled from the host store's memory when it holds
// another expert.
kc::MoeExpert CudaOps::device_expert(int layer, const ExpertCall& call) {
  const model::SwigluWeights& src = *call.weights;
  if (matrices_.contains(src.gate.data)) {
    return {.gate = device(src.gate).data,
            .up = device(src.up).data,
            .down = device(src.down).data,
            .weight = call.weight};
  }
  if (p_.experts_on_device) {
    // The cuda link's device slots: the store's pointers are device addresses already.
    SM_ASSERT(src.gate.stride() == src.gate.cols && src.up.stride() == src.up.cols &&
              src.down.stride() == src.down.cols);
    return {.gate = src.gate.data, .up = src.up.data, .down = src.down.data, .weight = call.weight};
  }
  const int m = p_.moe_index.at(static_cast<size_t>(layer));
  SM_ASSERT_MSG(m >= 0 && p_.cache_slots > 0, "expert store handed out weights not in the model");
  SM_ASSERT(call.slot >= 0 && call.slot < p_.cache_slots);
  const size_t idx =
      static_cast<size_t>(m) * static_cast<size_t>(p_.cache_slots) + static_cast<size_t>(call.slot);
  auto* base = static_cast<uint8_t*>(slot_mem_[idx]);
  const size_t gb = kernels::stored_bytes(src.gate), ub = kernels::stored_bytes(src.up);
  if (slot_expert_[idx] != call.expert || slot_source_[idx] != src.gate.data) {
    (void)into(src.gate, base);
    (void)into(src.up, base + gb);
    (void)into(src.down, base + gb + ub);
    slot_expert_[idx] = call.expert;
    slot_source_[idx] = src.gate.data;
  }
  return {.gate = base, .up = base + gb, .down = base + gb + ub, .weight = call.weight};
}

void CudaOps::moe(int layer, const float* x, int n, std::span<const ExpertCall> calls, float* out) {
  SM_ASSERT(n >= 1 && n <= p_.max_batch && calls.size() % static_cast<size_t>(n) == 0);
  const size_t K = calls.size() / static_cast<size_t>(n);
  SM_ASSERT(K <= static_cast<size_t>(p_.top_k));
  // The previous call's copy out of h_calls_ is complete: the MoE block ends with a sync.
  kc::WType dtype = kc::WType::kF32;
  for (size_t i = 0; i < calls.size(); ++i) {
    h_calls_[i] = device_expert(layer, calls[i]);
    dtype = weight_type(calls[i].weights->gate.dtype);
    SM_ASSERT(weight_type(calls[i].weights->up.dtype) == dtype &&
              weight_type(calls[i].weights->down.dtype) == dtype);
  }
  check(cudaMemcpyAsync(d_calls_, h_calls_, calls.size() * sizeof(kc::MoeExpert),
                        cudaMemcpyHostToDevice, stream_),
        "cudaMemcpyAsync");
  const int H = p_.hidden;
  for (int t = 0; t < n; ++t) {
    const auto off = static_cast<size_t>(t) * static_cast<size_t>(H);
    check_launch(kc::moe_fused(d_calls_ + static_cast<size_t>(t) * K, static_cast<int>(K), dtype, H,
                               p_.expert_ffn, x + off, d_h_, out + off, false, stream_),
                 "moe_fused");
  }
}

void CudaOps::delta_rule(const DeltaRuleSpec& spec, const DeltaRuleWeights& w, DeltaRuleState state,
                         float* qkv, const float* z, const float* b, const float* a, int n,
                         float* core) {
  const kc::DeltaRuleArgs args{.conv_state = state.conv,
                               .recurrent = state.recurrent,
                               .qkv = qkv,
                               .z = z,
                               .b = b,
                               .a = a,
                               .conv_w = device(w.conv),
                               .a_neg = device(w.a_neg),
                               .dt_bias = device(w.dt_bias),
                               .norm_w = device(w.norm),
                               .core = core};
  const kc::DeltaRuleShape sh{.k_heads = spec.k_heads,
                              .v_heads = spec.v_heads,
                              .dk = spec.dk,
                              .dv = spec.dv,
                              .conv_kernel = spec.conv_kernel,
                              .v_heads_tiled = spec.v_heads_tiled,
                              .eps = spec.eps};
  check_launch(kc::gated_delta_rule(args, n, sh, stream_), "gated_delta_rule");
}

}  // namespace

std::unique_ptr<Ops> make_cuda_ops(const CudaOpsParams& params) {
  std::string why;
  if (!cuda_backend_available(&why))
    fail("--backend", "cuda", "expected a usable CUDA backend, found {}", why);
  return std::make_unique<CudaOps>(params);
}

}  // namespace steermoe::engine
