// The op set (engine/ops.hpp) on the CPU: fp32 activations in RAM, weights of every stored type
// used in place from the mapped file, the kernels of kernels/ (scalar reference + AVX2 /
// AVX-512 with runtime dispatch) on a thread pool, an f32 KV cache committed page by page
// (kv_cache.hpp). Every scratch buffer is sized at construction, so no op allocates.
#pragma once

#include <memory>
#include <vector>

#include "engine/kv_cache.hpp"
#include "engine/ops.hpp"
#include "kernels/thread_pool.hpp"

namespace steermoe::engine {

// Sizes the MoE and product scratch is made for.
struct CpuOpsParams {
  int threads = 1;    // kernel threads (1..1024)
  int max_batch = 1;  // tokens per op call
  int hidden = 0;     // width of an expert's input and output
  int expert_ffn = 0;
  int experts = 0;  // expert ids are < experts
  int top_k = 0;    // calls per token
  // Gated DeltaNet batched prefill: token by token, or chunked (backend.hpp, DeltaRulePrefill).
  DeltaRulePrefill gdn_prefill = DeltaRulePrefill::kRecurrent;
};

class CpuOps final : public Ops {
 public:
  explicit CpuOps(const CpuOpsParams& params);
  ~CpuOps() override;

  bool host_memory() const override { return true; }
  float* alloc(size_t count) override;
  float* alloc_host(size_t count) override { return alloc(count); }
  void alloc_kv(int layers, int positions, size_t k_width, size_t v_width,
                const std::vector<uint8_t>& skip) override;
  float* kv_keys(int layer) override { return kv_.k(layer, 0); }
  void release_kv(int position) override { kv_.release_from(position); }
  size_t kv_resident_bytes() const override { return kv_.resident_bytes(); }
  float* kv_values(int layer) override { return kv_.v(layer, 0); }
  void prepare(const kernels::Matrix& /*w*/) override {}
  void prepare(std::span<const float> /*v*/) override {}

  void upload(float* dst, const float* host, size_t count) override;
  void download(float* host, const float* src, size_t count) override;
  void sync() override {}
  int threads() const override { return static_cast<int>(pool_.size()); }

  void matmul(std::span<const Product> products, int n) override;
  void rmsnorm(const float* x, int64_t x_stride, std::span<const float> w, float* out,
               int64_t out_stride, int rows, int dim, float eps) override;
  void rope(float* x, int n, int64_t token_stride, int heads, int pos0,
            const RopeSpec& spec) override;
  void attention(const float* q, const float* k_cache, const float* v_cache, float* out, int n,
                 int pos0, const AttentionSpec& spec) override;
  void swiglu(const float* gate, const float* up, float* out, int64_t count) override;
  void add(const float* a, const float* b, float* out, int64_t count) override;
  void clamp(float* x, int64_t count, float limit) override;
  void sigmoid_mul(float* x, const float* gate, int64_t count) override;
  void sigmoid_dot_scale(float* x, const float* a, std::span<const float> w, int rows,
                         int dim) override;
  void copy(const float* src, float* dst, const CopySpec& spec) override;
  void zero(float* x, size_t count) override;
  void moe(int layer, const float* x, int n, std::span<const ExpertCall> calls,
           float* out) override;
  void moe_part(int layer, const float* x, std::span<const ExpertCall> calls,
                std::span<const int32_t> picks, bool last, float* out) override;
  void delta_rule(const DeltaRuleSpec& spec, const DeltaRuleWeights& w, DeltaRuleState state,
                  float* qkv, const float* z, const float* b, const float* a, int n,
                  float* core) override;

 private:
  struct Scratch;
  void moe_decode(const float* x, std::span<const ExpertCall> calls, float* out);
  // Decode: the experts of calls at `picks`, each output into exp_out (no sum).
  void decode_experts(const float* x, std::span<const ExpertCall> calls,
                      std::span<const int32_t> picks);
  // out = the calls' exp_out weighted, summed in call order.
  void sum_decoded(std::span<const ExpertCall> calls, float* out);
  void moe_grouped(const float* x, int n, std::span<const ExpertCall> calls, float* out);
  void delta_rule_token(const DeltaRuleSpec& spec, const DeltaRuleWeights& w, DeltaRuleState state,
                        float* mixed, const float* z, const float* b, const float* a, float* core);
  void delta_rule_chunked(const DeltaRuleSpec& spec, const DeltaRuleWeights& w,
                          DeltaRuleState state, float* qkv, const float* z, const float* b,
                          const float* a, int n, float* core);
  // Conv + SiLU and the q / k norms of n tokens (rows of the conv dim), over the threads.
  void delta_rule_inputs(const DeltaRuleSpec& spec, const DeltaRuleWeights& w, DeltaRuleState state,
                         float* mixed, size_t n);

  CpuOpsParams params_;
  kernels::ThreadPool pool_;
  KvCache kv_;
  std::unique_ptr<Scratch> s_;
  std::vector<std::unique_ptr<float[]>> owned_;  // alloc()
  std::vector<float> gates_;  // chunked delta rule: g and beta [token][value head], grow-only
};

}  // namespace steermoe::engine
