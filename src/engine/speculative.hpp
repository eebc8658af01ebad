// Speculative decoding (the paper's section 7): a drafter proposes k tokens, the target verifies
// them at k+1 positions in one forward call, the longest accepted prefix and one token of the
// target's own are committed, and both engines roll their KV caches back to the committed
// history. Greedy verification commits exactly the target's greedy tokens; with a temperature,
// standard speculative sampling (accept a draft with probability min(1, p/q), else sample the
// normalised residual max(0, p - q)) keeps the target's sampling distribution.
//
// Verification: with a block rule configured on the target (--spec-select exact | block |
// block:conf, policy/block_selection.hpp) one forward pass whose every layer routes the k+1
// positions within one eligible set, with position weights from the measured commitment rate per
// depth (block: AcceptMoE's) or the drafter's confidence (block:conf); without one, the positions
// go through the target's own policy and logical cache as a batched prefill routes them.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <vector>

#include "engine/engine.hpp"
#include "engine/sampler.hpp"

namespace steermoe::engine {

// Throws naming the model where speculative decoding cannot run on it, as target or drafter:
// recurrent (Gated DeltaNet) layers, whose state rejected drafts cannot be taken back from.
// The decoder checks it; `serve` calls it at startup, before any request.
void check_speculative_target(const model::ModelConfig& config);

struct SpecParams {
  int draft_k = 4;           // drafts per verification (>= 1)
  float temperature = 0.0f;  // 0: greedy verification; > 0: speculative sampling
  uint64_t seed = 0;
};

// A drafter without a model, for teacher-forced runs at shapes whose random weights cannot draft
// (`bench --scores-from TRACE --draft synthetic:A[,MS]`): at every depth it proposes the text's
// token with probability `acceptance`, else another token drawn uniformly, reports `acceptance`
// as its confidence, and spends `ms_per_token` of wall time (busy, as a drafter computing on a
// core would) per draft. Its draws come from the decoder's seeded generator: deterministic.
struct SyntheticDraft {
  double acceptance = 0.7;
  double ms_per_token = 0;
};

// Counts over a run (per committed token: divide by committed).
struct SpecStats {
  int64_t verifications = 0;
  int64_t committed = 0;             // tokens committed by verifications
  int64_t drafted = 0;               // drafts proposed
  std::vector<int64_t> reached;      // [k]: verifications whose draft at depth d was checked
  std::vector<int64_t> accepted;     // [k]: ... and accepted
  int64_t block_copies = 0;          // experts verification blocks copied (block rules)
  int64_t verify_insertions = 0;     // logical insertions of verification through the policy
  int64_t restore_copies = 0;        // rollback: slots given back their expert after rejections
  double draft_s = 0, verify_s = 0;  // wall time drafting and verifying
  // Teacher-forced block verification with set_counterfactual(true): committed (position, MoE
  // layer) pairs, and those whose executed expert set differs from the one the same block
  // executes when its rejected positions carry the text's tokens instead of the drafts.
  int64_t replay_layers = 0, replay_differs = 0;
  // Committed tokens per verification (tau).
  double tau() const {
    return verifications > 0 ? static_cast<double>(committed) / verifications : 0.0;
  }
};

// The acceptance rule of speculative sampling for one draft token: accepted with probability
// min(1, p[token] / q[token]) given a uniform draw u in [0, 1). p, q: probabilities over the
// vocabulary (target, drafter).
bool accept_draft(std::span<const float> p, std::span<const float> q, int32_t token, double u);
// The token drawn from the residual distribution norm(max(0, p - q)) by a uniform draw u in
// [0, 1) (inverse CDF, ties to the lower id); from p itself when the residual is all zero.
int32_t sample_residual(std::span<const float> p, std::span<const float> q, double u);

class SpeculativeDecoder {
 public:
  // Both engines must share the vocabulary and outlive this. Throws steermoe::Error naming both
  // models when the vocabularies differ, and for models whose state cannot be rewound.
  SpeculativeDecoder(Engine& target, Engine& drafter, const SpecParams& params);
  // With a synthetic drafter: teacher forcing only (begin_forced / step_forced).
  SpeculativeDecoder(Engine& target, const SyntheticDraft& synthetic, const SpecParams& params);

  // A new sequence: both engines reset and take `prompt` (>= 1 token); returns the first
  // committed token (the target's, from the prompt's last logits).
  int32_t begin(std::span<const int32_t> prompt);

  // One verification: appends 1..k+1 committed tokens to `out` (the drafts accepted and one of
  // the target's own) and returns how many. Fewer drafts near the end of the context.
  int step(std::vector<int32_t>& out);

  // Teacher forcing (`kl --draft`): the committed tokens are a text's, not the target's.
  // begin_forced is begin with `next` (the text's token after the prompt) committed in place of
  // the target's pick; it returns the target's logits at the prompt's last position (valid until
  // the next call). step_forced verifies one block whose drafts are accepted while they equal
  // `text` (the tokens after the last committed one, >= 1 of them; fewer drafts than text
  // tokens), then commits the text's next token; it writes the target's logits of the committed
  // positions (row i predicts text[i]) to `logits` ([k+1][V] room) and returns how many tokens
  // it committed.
  std::span<const float> begin_forced(std::span<const int32_t> prompt, int32_t next);
  int step_forced(std::span<const int32_t> text, std::span<float> logits);

  // With a block rule and teacher forcing: before each verification, the same block with the
  // text's tokens at every draft position is verified from the same state and undone, and the
  // executed sets of the committed positions are compared (the paper's section 7 replay: how
  // often the rejected drafts change what committed tokens execute). Doubles verification.
  void set_counterfactual(bool on) { counterfactual_ = on; }

  const SpecStats& stats() const { return stats_; }
  int draft_k() const { return params_.draft_k; }

 private:
  // Drafts up to min(draft_k, room, max_drafts) tokens after last_ and verifies them with last_
  // in one target call (block_, logits_); returns the number of drafts k.
  // `truth`: the text's tokens after last_ (teacher forcing; empty otherwise), for the
  // counterfactual block.
  int draft_and_verify(int max_drafts, std::span<const int32_t> truth = {});
  // The counterfactual's comparison for committed positions 0..accepted.
  void count_replay(int accepted);
  // Commits drafts 1..accepted and `next` (appended to *out when given), rolls both engines back
  // to the committed history and counts the verification.
  void commit(int n, int k, int accepted, int32_t next, std::vector<int32_t>* out);
  // The tokens the target has not seen yet: the last committed one (its next input).
  int32_t pick(std::span<const float> logits);
  void size_buffers();
  void probabilities(std::span<const float> logits, std::vector<float>& out) const;
  std::span<const float> position_weights(int k);

  Engine& target_;
  Engine* drafter_ = nullptr;                // null with a synthetic drafter
  std::optional<SyntheticDraft> synthetic_;
  SpecParams params_;
  std::mt19937_64 rng_;
  int32_t last_ = 0;                // last committed token, not yet fed to the target
  std::vector<int32_t> block_;      // [k+1]: last_ then the drafts
  std::vector<float> logits_;       // [k+1][V] target logits of the block
  std::vector<float> draft_probs_;  // [k][V] drafter probabilities of its drafts (sampling)
  std::vector<float> p_;            // [V] scratch
  std::vector<float> alpha_;        // [k+1] position weights of the block
  std::vector<float> confidence_;   // [k] drafter's probability of each draft
  SpecStats stats_;
  // Counterfactual replay (set_counterfactual).
  bool counterfactual_ = false;
  bool replayed_ = false;                   // the last verification has a counterfactual
  schedule::OffloadStep::BlockCheckpoint checkpoint_;
  RoutingRecord record_;                    // executed sets of a verification
  std::vector<int32_t> counterfactual_set_;  // [k+1][L][K] of the counterfactual block
  std::vector<int32_t> truth_block_;         // [k+1] last_ then the text's tokens
  std::vector<float> truth_logits_;          // [k+1][V]
};

// The decoder for `synthetic` when it is set, else for the drafter model (non-null then): what
// the commands that take either (`--draft MODEL` or `--draft synthetic:A[,MS]`) build.
std::unique_ptr<SpeculativeDecoder> make_speculative_decoder(
    Engine& target, Engine* drafter, const std::optional<SyntheticDraft>& synthetic,
    const SpecParams& params);

}  // namespace steermoe::engine
