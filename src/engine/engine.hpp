// The CPU inference engine: batched prompt processing and token-by-token decoding with a KV
// cache, fp32 activations over F32/BF16/F16 weights, MoE routing through the policy library.
//
// Entry point: Engine. One Engine = one sequence at a time (reset() starts a new one). The
// decode path (decode()) allocates nothing: every buffer is sized at construction.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/kv_cache.hpp"
#include "engine/routing.hpp"
#include "kernels/kernels.hpp"
#include "model/weights.hpp"

namespace steermoe::engine {

struct EngineParams {
  int threads = 1;                         // kernel threads (the caller's thread counts)
  int context = 0;                         // KV cache positions; 0 = min(trained context, 4096)
  int max_batch = 64;                      // prompt tokens processed per batched step
  std::string policy = "exact:evict=lru";  // routing policy string
  int cache_slots = 0;                     // logical expert-cache slots per layer; 0 = all experts
  const policy::Calibration* calibration = nullptr;  // optional (needed by cache-aware policies)
};

// Router scores and decisions of every processed token, in the trace format's terms
// (docs/trace-format.md). Rows are [token][moe layer][expert] (scores) or [token][moe layer][k].
struct RoutingRecord {
  int moe_layers = 0;
  int experts = 0;
  int top_k = 0;
  bool sigmoid = false;
  std::vector<int32_t> tokens;           // [T] input token of each step
  std::vector<float> scores;             // [T][L][E] selection scores z
  std::vector<float> pregate;            // [T][L][E] row l = router l on MoE input l-1; row 0 zero
  std::vector<float> weight_scores;      // [T][L][E] sigmoid routers only (unbiased scores)
  std::vector<int32_t> selected;         // [T][L][K] executed experts, ascending
  std::vector<float> weights;            // [T][L][K] execution weights aligned with selected
  std::vector<int64_t> sequence_starts;  // step index where each sequence starts

  size_t steps() const { return tokens.size(); }
  void clear();
};

class Engine {
 public:
  Engine(const model::Model& model, const EngineParams& params);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const model::ModelConfig& config() const { return cfg_; }
  int position() const { return pos_; }
  int context() const { return context_; }
  int threads() const { return static_cast<int>(pool_.size()); }
  LayerRouting& routing() { return *routing_; }

  // Starts a new sequence: empty KV cache, routers back to their warm sets.
  void reset();

  // Feeds one token at position(); returns the logits [vocab] (valid until the next call).
  std::span<const float> decode(int32_t token);

  // Feeds `tokens` at positions position() .. as batches of up to max_batch tokens. If
  // `all_logits` is non-empty it receives [n][vocab] logits; the last token's logits are
  // returned (valid until the next call) either way.
  std::span<const float> prefill(std::span<const int32_t> tokens, std::span<float> all_logits = {});

  // Records router scores and decisions of every token from now on (nullptr stops).
  void set_recorder(RoutingRecord* record);

 private:
  struct Scratch;
  void forward(std::span<const int32_t> tokens, std::span<float> all_logits);
  void attention_gqa(int layer, int n);
  void attention_mla(int layer, int n);
  void moe(int layer, int n);
  void dense_ffn(int layer, int n);
  void swiglu_block(const model::SwigluWeights& w, int ffn, const float* in, int n, float* out);
  void route(int layer, int moe_index, int n);
  void check_token(int32_t token) const;

  const model::Model& model_;
  const model::ModelConfig& cfg_;
  EngineParams params_;
  int context_ = 0;
  int pos_ = 0;
  kernels::ThreadPool pool_;
  std::unique_ptr<LayerRouting> routing_;
  KvCache kv_;
  std::vector<int> moe_index_;       // [layers] -> MoE index or -1
  std::vector<int> next_moe_layer_;  // [layers] -> the next MoE layer after l, or -1
  std::unique_ptr<Scratch> s_;
  RoutingRecord* record_ = nullptr;
  size_t record_base_ = 0;  // first record row of the current forward()
  bool want_pregate_ = false;
  std::span<const int32_t> cur_tokens_;  // tokens of the current forward()
};

}  // namespace steermoe::engine
