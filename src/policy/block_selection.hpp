// Block-level expert selection for speculative decoding (the paper's section 7 and Appendix B;
// AcceptMoE's rule with the paper's variant): for each MoE layer of a verification block of n
// positions (position 0 = the last committed token, 1..n-1 = drafts), one eligible set chosen
// from the router's demand at every position, and every position routes within it. A pool of P
// experts per layer stays between blocks (refilled by recency); the block's experts outside the
// pool are its copies, at most U of them (the union slots) beyond the root position's own.
//
//   exact       every position routes exactly (its own top-K); the block copies the union.
//   block       eligible set = A (position 0's top-K) + the min(ceil(gamma e^H), m) experts outside
//               A of highest weighted demand u_e = sum_d alpha_d r_d,e [e in TopK(z_d)] (r_d the
//               router softmax, m the experts with u_e > 0, H the entropy of u normalised outside
//               A); members outside A and the pool pruned, lowest demand first, down to U copies.
//               Each position routes top-K within the set.
//   block:conf  the same with the caller's confidence weights, gamma 1.05, and a top-1 rescue:
//               a position with alpha_d >= the rescue threshold keeps its own top-1 expert.
// Position weights alpha are the caller's (alpha_0 = 1). Pure arithmetic on plain data, like
// the rest of policy/: deterministic, no allocation after construction.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "policy/calibration.hpp"
#include "policy/config.hpp"
#include "policy/router.hpp"

namespace steermoe::policy {

enum class BlockRule : uint8_t { kExact, kBlock, kBlockConf };

struct BlockParams {
  BlockRule rule = BlockRule::kExact;
  int pool = 0;         // P: experts per layer kept between blocks (K <= P <= E)
  int union_slots = 0;  // U: copies a block may make per layer (>= K)
  float gamma = 1.0f;   // set size factor (1 for block, 1.05 for block:conf)
  float rescue = 0.3f;  // block:conf: alpha threshold for the top-1 rescue
  // On a link (latency only): while layer l computes, copy the experts the next layer's router
  // ranks highest at the block's positions (pre-gate scores) into its free slots.
  bool prefetch_next = true;
};

// Throws naming --pool / --union-slots where P or U lies outside [top-k, experts].
void validate(const BlockParams& params, const RouterSpec& spec);

// "exact" | "block" | "block:conf" (Error naming --spec-select otherwise), and back.
BlockRule parse_block_rule(std::string_view text);
const char* block_rule_name(BlockRule rule);

class BlockSelector {
 public:
  // Softmax routers only (their r_d is the router softmax). `calibration` gives the warm pool
  // (its first P experts by count) and must outlive the selector.
  BlockSelector(const RouterSpec& spec, const BlockParams& params, const Calibration& calibration,
                int max_positions);

  // New sequence: every layer's pool back to its warm set.
  void reset();

  // Layer `layer` of a block of n positions: z and weight_scores rows [n][E] (weight_scores may
  // be empty: z are the logits), alpha [n]. Returns one decision per position (valid until the
  // next select of this layer; the caller fills selected_slot where slots exist) and refills
  // the layer's pool afterwards.
  std::span<Decision> select(int layer, int n, std::span<const float> z,
                                   std::span<const float> weight_scores,
                                   std::span<const float> alpha);

  // Copies of the last select (block experts that were not in the pool).
  int last_copies() const { return last_copies_; }
  // Size of the last eligible set (block rules; the union for exact).
  int last_set_size() const { return last_set_; }
  bool in_pool(int layer, int expert) const;
  const BlockParams& params() const { return params_; }

  // The selection state between blocks (pools, recency): saved and loaded so that a block can be
  // tried and taken back (the counterfactual replay of `kl --draft`).
  struct State {
    int64_t block = 0;
    std::vector<int64_t> stamp;
    std::vector<uint8_t> pool;
  };
  void save(State& out) const;
  void load(const State& in);

 private:
  void choose_set(int n, std::span<const float> z, std::span<const float> alpha);
  void route_position(int layer, int d, std::span<const float> z, std::span<const float> ws,
                      float alpha);
  void refill_pool(int layer);

  RouterSpec spec_;
  BlockParams params_;
  const Calibration* calibration_;
  int max_positions_;
  int64_t block_ = 0;                // blocks selected so far (recency stamp)
  std::vector<int64_t> stamp_;       // [L][E] last block that executed the expert
  std::vector<uint8_t> pool_;        // [L][E] in the pool
  std::vector<Decision> decisions_;  // [max_positions]
  // Scratch.
  std::vector<float> probs_;                // [n][E] router softmax
  std::vector<int32_t> topk_;               // [n][K] each position's exact top-K, rank order
  std::vector<float> demand_;               // [E]
  std::vector<uint8_t> in_set_, in_union_;  // [E]
  std::vector<int32_t> order_;              // [E]
  std::vector<float> masked_;               // [E]
  std::vector<int32_t> pick_;               // [K]
  int last_copies_ = 0, last_set_ = 0;
  int current_layer_ = 0;
};

}  // namespace steermoe::policy
