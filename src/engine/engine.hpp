// The inference engine: one backend-neutral loop over the model's layers that calls a compute
// backend at block level (engine/backend.hpp; the CPU backend is engine/cpu/), reads experts
// through an expert store (engine/expert_store.hpp), and routes every MoE layer through the one
// owner of the per-token call order, schedule::OffloadStep (policy part 2 of layer l, part 1 of
// layer l+1, the scheduler, the wait).
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
#include "engine/expert_store.hpp"
#include "engine/offload.hpp"
#include "engine/score_source.hpp"
#include "model/weights.hpp"
#include "policy/calibration.hpp"
#include "policy/config.hpp"
#include "schedule/offload_step.hpp"

namespace steermoe::engine {

// The router facts of a model, for the policy library.
policy::RouterSpec router_spec(const model::ModelConfig& config);

struct EngineParams {
  int threads = 1;                         // kernel threads (the caller's thread counts)
  int context = 0;                         // KV cache positions; 0 = min(trained context, 4096)
  int max_batch = 64;                      // prompt tokens processed per batched step
  std::string policy = "exact:evict=lru";  // routing policy string
  int cache_slots = 0;                     // logical expert-cache slots per layer; 0 = all experts
  const policy::Calibration* calibration = nullptr;  // optional (needed by cache-aware policies)
  // Where experts live and how they move (engine/offload.hpp): resident | sim:PROFILE |
  // emulated:GBPS[,LATENCY_US] | disk.
  std::string link = "resident";
  int max_inflight = 2;  // prefetch copies in flight at a layer boundary (>= 1)
  bool verify = false;   // disk link: check every copied expert's checksum
  // Benchmark hook: routing scores from outside (bench --scores-from); null = the model's own.
  ScoreSource* score_source = nullptr;
  double test_copy_delay_max_s = 0;  // test hook: random extra delay per emulated copy
  uint64_t test_copy_delay_seed = 1;
  // Compute backend: "cpu" or "cuda" (engine/cuda_backend_factory.hpp; an error when this
  // binary has no CUDA or no device is present). The CLI resolves its "auto" before this.
  std::string backend = "cpu";
  bool quiet = false;  // cuda: no device report on stderr
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

// Counts of the policy's logical decisions (what `kl` and `bench` report without a link).
struct RoutingCounters {
  int64_t tokens = 0;       // tokens routed (every MoE layer counted once per token)
  int64_t layer_steps = 0;  // (token, MoE layer) steps
  int64_t replaced = 0;     // router top-K experts replaced by the policy (|S \ exact|)
  int64_t demand = 0;       // logical demand insertions
  int64_t prefetch = 0;     // logical prefetch insertions
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
  int threads() const { return backend_->threads(); }
  // The router facts of the model, for the policy library.
  const policy::RouterSpec& router_spec() const { return spec_; }
  const policy::PolicyConfig& policy() const { return step_->config(); }
  int cache_slots() const { return slots_; }
  // The routing and scheduling step (decisions, scheduler accounting).
  schedule::OffloadStep& offload() { return *step_; }
  const schedule::OffloadStep& offload() const { return *step_; }
  // The link, slots and expert store (engine/offload.hpp).
  const Offload& experts() const { return *offload_; }
  // Logical routing counters since construction (every token, prompt included).
  const RoutingCounters& counters() const { return counters_; }

  // Starts a new sequence: empty KV cache, every layer's cache back to its warm set.
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
  void forward(std::span<const int32_t> tokens, std::span<float> all_logits);
  void route_tokens(int layer, int moe_layer, std::span<const int32_t> tokens,
                    const RouterScores& scores);
  RouterScores supplied_scores(int moe_layer, bool want_pregate, int n);
  void record_rows(int moe_layer, int t, const policy::Decision& d, const RouterScores& scores);
  void check_token(int32_t token) const;

  const model::Model& model_;
  const model::ModelConfig& cfg_;
  EngineParams params_;
  policy::RouterSpec spec_;
  policy::Calibration calibration_;  // the step holds a reference: must not move
  int slots_ = 0;
  int context_ = 0;
  int pos_ = 0;
  std::unique_ptr<ComputeBackend> backend_;
  std::unique_ptr<Offload> offload_;  // before step_: the scheduler uses its link
  std::unique_ptr<schedule::OffloadStep> step_;
  RoutingCounters counters_;
  std::vector<int> moe_index_;       // [layers] -> MoE index or -1
  std::vector<int> next_moe_layer_;  // [layers] -> the next MoE layer after l, or -1
  std::vector<float> pre_cur_;       // [B][E] pre-gate scores of the current MoE layer
  bool pre_cur_valid_ = false;       // pre_cur_ holds a pre-gate (else zeros)
  std::vector<ExpertCall> calls_;    // [B][K] experts of the current MoE layer
  std::vector<float> supplied_z_, supplied_pre_;  // [B][E] rows from params_.score_source
  RoutingRecord* record_ = nullptr;
  size_t record_base_ = 0;  // first record row of the current forward()
  bool want_pregate_ = false;
};

}  // namespace steermoe::engine
