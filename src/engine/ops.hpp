// The op set every compute backend implements. The block sequences of the model families
// (ops_backend.cpp) are written once over these ops; a backend implements ops, never blocks
// (CPU: cpu/cpu_ops.*, CUDA: cuda/cuda_ops.cpp). tests/engine/ops_test.cpp checks every op of
// every backend against a scalar reference.
//
// Two kinds of pointers cross this interface:
// - Weights are the model's host objects (kernels::Matrix, a WeightVector's floats). A backend
//   resolves them to its own copy: the CPU reads them in place, CUDA looks up the device copy
//   that prepare() made. So block code reads model::LayerWeights and never a backend's mirror.
// - Activations are backend pointers (host memory on the CPU, device memory on CUDA) from
//   alloc(); block code does arithmetic on them but never dereferences them.
// Ops run in issue order; results are visible on the host after download() + sync().
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "engine/backend.hpp"
#include "kernels/kernels.hpp"

namespace steermoe::engine {

// y[t][r] = sum_c W[r][c] * x[t][c] for the n tokens of a matmul call; x rows are w->cols floats
// apart, y rows w->rows floats apart.
struct Product {
  const kernels::Matrix* w = nullptr;
  const float* x = nullptr;
  float* y = nullptr;
};

// Rotary embedding of the heads of one token: elements [rot_offset, rot_offset + rot_dim) of each
// head, heads head_stride floats apart.
struct RopeSpec {
  kernels::RopeStyle style = kernels::RopeStyle::kNeox;
  int head_stride = 0;
  int rot_offset = 0;
  int rot_dim = 0;  // even
  float theta = 10000.0f;
  const float* inv_freq = nullptr;  // backend memory: rot_dim / 2 frequencies (YaRN), or null
  float attention_factor = 1.0f;    // cos and sin are multiplied by it (YaRN)
};

// Causal attention over a KV cache whose position p holds kv_heads * dk key floats and
// kv_heads * dv value floats; query head h reads kv head h / (heads / kv_heads).
struct AttentionSpec {
  int heads = 0;
  int kv_heads = 0;
  int dk = 0;
  int dv = 0;
  float scale = 1.0f;
};

// dst[o * dst_outer + r * dst_row + c] = src[o * src_outer + r * src_row + c] for o < outer,
// r < rows, c < cols (strides in floats; a source stride of 0 broadcasts).
struct CopySpec {
  int outer = 1;
  int rows = 1;
  int cols = 0;
  int64_t src_outer = 0;
  int64_t src_row = 0;
  int64_t dst_outer = 0;
  int64_t dst_row = 0;
};

// One Gated DeltaNet layer's recurrent part (kernels/linear_attention.hpp has the formulas).
struct DeltaRuleSpec {
  int k_heads = 0;
  int v_heads = 0;
  int dk = 0;  // key head dims
  int dv = 0;  // value head dims
  int conv_kernel = 0;
  bool v_heads_tiled = false;  // value head h reads key head h % k_heads (else h / ratio)
  float eps = 1e-6f;           // of the gated RMSNorm
};
struct DeltaRuleWeights {
  std::span<const float> conv;     // [conv_dim][conv_kernel]
  std::span<const float> a_neg;    // [v_heads] -exp(A_log)
  std::span<const float> dt_bias;  // [v_heads]
  std::span<const float> norm;     // [dv]
};
struct DeltaRuleState {
  float* conv = nullptr;       // backend memory [conv_dim][conv_kernel - 1]
  float* recurrent = nullptr;  // backend memory [v_heads][dk][dv]
};

class Ops {
 public:
  virtual ~Ops() = default;

  // ---- memory: at construction only, never on the per-token path ----
  // True when activations are host memory: block code then reads results in place.
  virtual bool host_memory() const = 0;
  // `count` zeroed floats of backend memory, owned by the ops.
  virtual float* alloc(size_t count) = 0;
  // `count` zeroed floats of host memory the backend transfers fastest (CUDA: pinned).
  virtual float* alloc_host(size_t count) = 0;
  // The KV cache: per layer `positions` rows of k_width and v_width floats, zeroed; layers with
  // skip[l] != 0 have none (empty skip: every layer has one).
  virtual void alloc_kv(int layers, int positions, size_t k_width, size_t v_width,
                        const std::vector<uint8_t>& skip) = 0;
  // The KV memory of positions from `position` on back to the system (host memory committed
  // as written; a device's is allocated whole, so nothing to give back by default).
  virtual void release_kv(int /*position*/) {}
  // Bytes of KV memory committed now (host memory; 0 where not known).
  virtual size_t kv_resident_bytes() const { return 0; }
  virtual float* kv_keys(int layer) = 0;    // position 0 of the layer's keys
  virtual float* kv_values(int layer) = 0;  // position 0 of the layer's values
  // Makes a model weight usable by the ops (CUDA: uploads it). Throws steermoe::Error for a
  // weight type the backend cannot compute with.
  virtual void prepare(const kernels::Matrix& w) = 0;
  virtual void prepare(std::span<const float> v) = 0;

  // ---- transfers ----
  virtual void upload(float* dst, const float* host, size_t count) = 0;
  virtual void download(float* host, const float* src, size_t count) = 0;
  virtual void sync() = 0;  // every op issued so far has completed
  virtual int threads() const = 0;

  // ---- ops ----
  // Every product over the same n tokens (one synchronisation for all of them on the CPU).
  virtual void matmul(std::span<const Product> products, int n) = 0;
  // out row r = x row r * rsqrt(mean(x row^2) + eps) * w, rows x_stride / out_stride apart.
  virtual void rmsnorm(const float* x, int64_t x_stride, std::span<const float> w, float* out,
                       int64_t out_stride, int rows, int dim, float eps) = 0;
  // In place on n tokens token_stride floats apart; token t is at position pos0 + t.
  virtual void rope(float* x, int n, int64_t token_stride, int heads, int pos0,
                    const RopeSpec& spec) = 0;
  // n queries [n][heads][dk] at positions pos0 .. pos0 + n - 1, each over the cache positions
  // up to its own; out [n][heads][dv].
  virtual void attention(const float* q, const float* k_cache, const float* v_cache, float* out,
                         int n, int pos0, const AttentionSpec& spec) = 0;
  // out = silu(gate) * up.
  virtual void swiglu(const float* gate, const float* up, float* out, int64_t count) = 0;
  virtual void add(const float* a, const float* b, float* out, int64_t count) = 0;
  // x = clamp(x, -limit, limit).
  virtual void clamp(float* x, int64_t count, float limit) = 0;
  // x *= sigmoid(gate).
  virtual void sigmoid_mul(float* x, const float* gate, int64_t count) = 0;
  // Row r of x (dim floats) *= sigmoid(w . row r of a).
  virtual void sigmoid_dot_scale(float* x, const float* a, std::span<const float> w, int rows,
                                 int dim) = 0;
  virtual void copy(const float* src, float* dst, const CopySpec& spec) = 0;
  virtual void zero(float* x, size_t count) = 0;
  // out [n][hidden] = sum over each token's calls (calls [n][K], ascending experts) of
  // weight * down(silu(gate x) * up x), summed in call order. `layer` is the model layer.
  virtual void moe(int layer, const float* x, int n, std::span<const ExpertCall> calls,
                   float* out) = 0;
  // One token's moe() in parts (schedule::MoeWait::kReady: a layer's experts computed as their
  // copies complete): the calls at positions `picks` (ascending) now; at `last`, when every call
  // has been in a part, out = the sum moe() gives, bit for bit. Calls not picked yet may hold
  // stale weight pointers. This default computes everything at the last part.
  virtual void moe_part(int layer, const float* x, std::span<const ExpertCall> calls,
                        std::span<const int32_t> /*picks*/, bool last, float* out) {
    if (last) moe(layer, x, 1, calls, out);
  }
  // Gated DeltaNet over n tokens, one after the other: qkv [n][2 * k_heads * dk + v_heads * dv]
  // (the projections; overwritten), z [n][v_heads * dv], b and a [n][v_heads]; the state
  // advances; core [n][v_heads * dv] gets the gated-normalised outputs.
  virtual void delta_rule(const DeltaRuleSpec& spec, const DeltaRuleWeights& w,
                          DeltaRuleState state, float* qkv, const float* z, const float* b,
                          const float* a, int n, float* core) = 0;
};

}  // namespace steermoe::engine
