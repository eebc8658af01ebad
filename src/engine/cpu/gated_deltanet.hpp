// Gated DeltaNet (linear attention) layers of Qwen3-Next / Qwen3.5-MoE on the CPU: a
// self-contained block that works on activation buffers, the layer's weights
// (model::LinearAttnWeights) and the layer's recurrent state, which replaces the KV cache for
// these layers.
//
// Per token (transformers' torch_recurrent_gated_delta_rule order, fp32):
//   [q | k | v] = W_qkv x, z = W_z x, b = W_b x, a = W_a x (batched over the n tokens)
//   [q | k | v] = silu(causal depthwise conv (kernel K) with the rolling conv state)
//   q, k L2-normalised per key head (eps 1e-6), q *= dk^-0.5
//   per value head h (key head h / (nv / nk), or h % nk for the tiled GGUF order):
//     beta = sigmoid(b_h), g = -exp(A_log_h) * softplus(a_h + dt_bias_h)
//     S_h *= exp(g); S_h += k (beta (v_h - S_h^T k))^T; o_h = S_h^T q
//     o_h = w_norm * rmsnorm(o_h) * silu(z_h)
//   out = W_out o
// The linear layers run token by token inside a batch (prefill makes exactly the decode path's
// computations, hence the same routing); only the projections are batched. No chunked form.
#pragma once

#include <vector>

#include "kernels/kernels.hpp"
#include "model/config.hpp"
#include "model/weights.hpp"

namespace steermoe::engine {

// The recurrent state of one Gated DeltaNet layer for one sequence.
struct LinearAttnState {
  std::vector<float> conv;       // [conv_dim][conv_kernel - 1] previous conv inputs, oldest first
  std::vector<float> recurrent;  // [v_heads][k_head_dim][v_head_dim] delta-rule state S
  void init(const model::LinearAttnConfig& a);
  void zero();
};

class GatedDeltaNet {
 public:
  // Scratch for up to `max_batch` tokens (no allocation in forward()).
  GatedDeltaNet(const model::ModelConfig& config, int max_batch);

  // out [n][hidden] = the layer applied to x [n][hidden] (the normalised block input); the state
  // advances by n tokens.
  void forward(kernels::ThreadPool& pool, const model::LinearAttnWeights& w,
               LinearAttnState& state, const float* x, int n, float* out);

 private:
  const model::ModelConfig& cfg_;
  std::vector<float> qkv_;   // [B][conv_dim]
  std::vector<float> z_;     // [B][value_dim]
  std::vector<float> b_;     // [B][v_heads]
  std::vector<float> a_;     // [B][v_heads]
  std::vector<float> core_;  // [B][value_dim]
};

}  // namespace steermoe::engine
