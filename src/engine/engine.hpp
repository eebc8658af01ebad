// The inference engine: a compute backend (engine/backend.hpp; the CPU backend is engine/cpu/)
// driven by the one owner of the call order, schedule::OffloadStep, inside the expert cache
// (engine/expert_cache.hpp): the engine is the step's driver (the attention and router scores of
// each MoE layer, the MoE on the step's decision, the head), the cache decides routing, copies
// and waits.
//
// Entry point: Engine. One Engine = one sequence at a time (reset() starts a new one). The
// decode path (decode()) allocates nothing: every buffer is sized at construction.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/backend.hpp"
#include "engine/cache_stats.hpp"
#include "engine/expert_cache.hpp"
#include "engine/model_facts.hpp"
#include "engine/score_source.hpp"
#include "model/weights.hpp"
#include "policy/config.hpp"
#include "schedule/offload_config.hpp"
#include "schedule/offload_step.hpp"

namespace steermoe::engine {

struct EngineParams {
  int threads = 1;  // kernel threads (the caller's thread counts)
  int context = 0;  // KV cache positions; 0 = min(trained context, 4096)
  // Prompt tokens processed per batched step (every expert resident). 128 rather than 64: an
  // expert's weights are read once per step for the tokens routed to it, so twice the tokens
  // per read; bench_pp_tg pp128 on an AVX-512 Xeon, 3 alternating rounds, 1 / 2 threads: BF16
  // +7-28% / +12-16%, Q8_0 0-21% / 0-10%, Q4_K_M within noise (bench/peers/results/
  // ab-xeon-prefill-max-batch-64-vs-128-after-prefetch.json). Scratch grows linearly with it.
  int max_batch = 128;
  // Routing policy, cache size, link, max_inflight, calibration: resolved and validated by
  // schedule::resolve_offload (the default: exact LRU routing, every expert resident).
  schedule::OffloadConfig offload;
  // Benchmark hook: routing scores from outside (bench --scores-from); null = the model's own.
  ScoreSource* score_source = nullptr;
  double test_copy_delay_max_s = 0;  // test hook: random extra delay per emulated copy
  uint64_t test_copy_delay_seed = 1;
  // Compute backend: "cpu" or "cuda" (engine/cuda_backend_factory.hpp; an error when this
  // binary has no CUDA or no device is present). The CLI resolves its "auto" before this.
  std::string backend = "cpu";
  // Gated DeltaNet prefill (hybrid models): token by token (default) or chunked (--gdn-prefill).
  DeltaRulePrefill gdn_prefill = DeltaRulePrefill::kRecurrent;
  bool quiet = false;  // cuda: no device report on stderr
};

// The offload configuration of `model` for `request` (schedule::resolve_offload against the
// model's facts).
schedule::OffloadConfig resolve_offload(const model::Model& model,
                                        const schedule::OffloadRequest& request);

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

class Engine : private schedule::LayerDriver {
 public:
  Engine(const model::Model& model, const EngineParams& params);
  ~Engine() override;
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const model::ModelConfig& config() const { return cfg_; }
  int position() const { return pos_; }
  int context() const { return context_; }
  int threads() const { return backend_->threads(); }
  // Prompt tokens per prefill step: max_batch when every expert is addressable at once, else 1
  // (with offloaded experts the prompt goes token by token: the decisions are the same either
  // way, and each token's experts must be in the cache when its MoE runs).
  int prefill_step_tokens() const { return cache_->batched_prefill() ? params_.max_batch : 1; }
  // The router facts of the model, for the policy library.
  const policy::RouterSpec& router_spec() const { return spec_; }
  const policy::PolicyConfig& policy() const { return cache_->config().policy; }
  int cache_slots() const { return cache_->cache_slots(); }
  // Where experts live, how they move, and what routing and copying did.
  const ExpertCache& expert_cache() const { return *cache_; }
  // The expert cache's statistics since construction (every token, prompt included).
  CacheStats cache_stats() const { return cache_->stats(); }

  // Starts a new sequence: empty KV cache, every layer's cache back to its warm set.
  void reset();
  // Between sequences: the KV memory past `positions` goes back to the system when the sequences
  // since the last call reached beyond it (a server keeps only what its longest recent request
  // needs, not the high-water mark of its longest ever). Bits never change: attention reads only
  // positions the sequence wrote. The current sequence's positions are kept.
  void release_kv_beyond(int positions);
  // The current sequence is over (a server's request has been answered): its KV memory past
  // `keep_positions` goes back to the system at once, and decode / prefill are refused until
  // reset() starts the next sequence.
  void end_sequence(int keep_positions);
  // KV memory committed now (what end_sequence gives back; 0 where the backend cannot tell).
  size_t kv_resident_bytes() const { return backend_->kv_resident_bytes(); }

  // Feeds one token at position(); returns the logits [vocab] (valid until the next call).
  std::span<const float> decode(int32_t token);

  // Feeds `tokens` at positions position() .. as batches of up to max_batch tokens. If
  // `all_logits` is non-empty it receives [n][vocab] logits; the last token's logits are
  // returned (valid until the next call) either way.
  std::span<const float> prefill(std::span<const int32_t> tokens, std::span<float> all_logits = {});

  // Speculative decoding's verification: `tokens` (the last committed token, then the drafts)
  // at positions position() .. in one forward pass, routed by the configured block rule
  // (EngineParams::offload.block) with position weights `alpha` (alpha[0] = 1); every
  // position's logits into `all_logits` ([n][vocab]).
  void verify(std::span<const int32_t> tokens, std::span<const float> alpha,
              std::span<float> all_logits);
  bool verifies_in_blocks() const { return cache_->config().block.has_value(); }
  // A verification tried and undone (the counterfactual replay of `kl --draft`): the block
  // rules' state and the routing counts saved, then put back; with rollback() for the positions.
  void save_blocks(schedule::OffloadStep::BlockCheckpoint& out) const { cache_->save_blocks(out); }
  void restore_blocks(const schedule::OffloadStep::BlockCheckpoint& in) {
    cache_->restore_blocks(in);
  }

  // --spec-select rollback (EngineParams::offload.rollback): the next `positions` positions'
  // routing may be taken back by rollback(), which then also puts the policy's logical caches
  // back to their state after the kept positions.
  bool rolls_back_routing() const { return cache_->config().rollback; }
  void mark_rollback(int positions);

  // Forgets every position from `position` on (speculative decoding: drafts the target rejected):
  // the next token goes to `position`. The KV cache needs no clearing (attention reads only
  // positions below the current one). Throws steermoe::Error for a model with recurrent layers
  // (Gated DeltaNet state cannot be rewound) or a position beyond the current one.
  void rollback(int position);

  // Records router scores and decisions of every token from now on (nullptr stops).
  void set_recorder(RoutingRecord* record);

 private:
  void forward(std::span<const int32_t> tokens, std::span<float> all_logits,
               std::span<const float> block_alpha = {});
  void run_dense_layers(int until);
  RouterScores supplied_scores(int moe_layer, bool want_pregate, int n);
  void record_rows(int moe_layer, int t, const policy::Decision& d, std::span<const float> pregate);
  void check_token(int32_t token) const;
  // The step's driver (schedule::LayerDriver): this engine's backend computes each layer.
  schedule::LayerScores scores(int moe_layer) override;
  void routed(int moe_layer, int position, const policy::Decision& d,
              std::span<const float> pregate) override;
  void moe(int moe_layer) override;
  void moe_part(int moe_layer, std::span<const int32_t> picks, bool first, bool last) override;
  void finish() override;

  const model::Model& model_;
  const model::ModelConfig& cfg_;
  EngineParams params_;
  policy::RouterSpec spec_;
  int context_ = 0;
  int pos_ = 0;
  int mark_pos_ = -1;  // position at mark_rollback(), -1 without a mark
  int kv_high_ = 0;    // the furthest KV position written since the last release_kv_beyond
  bool ended_ = false;  // end_sequence() called: no forward pass before reset()
  std::unique_ptr<ComputeBackend> backend_;
  std::unique_ptr<ExpertCache> cache_;
  std::vector<int> moe_layers_;                   // [MoE layers] -> model layer
  std::vector<int> next_moe_layer_;               // [layers] -> the next MoE layer after l, or -1
  std::vector<ExpertCall> calls_;                 // [B][K] experts of the current MoE layer
  std::vector<float> supplied_z_, supplied_pre_;  // [B][E] rows from params_.score_source
  std::vector<float> supplied_w_;  // [B][E] its weight scores (sigmoid routers; else empty)
  RoutingRecord* record_ = nullptr;
  size_t record_base_ = 0;  // first record row of the current forward()
  bool want_pregate_ = false;
  // The current forward(): its size, the next model layer to run, the current MoE layer's
  // scores, where the head writes.
  int n_ = 0;
  int next_layer_ = 0;
  RouterScores current_;
  std::span<float> all_logits_;
};

}  // namespace steermoe::engine
