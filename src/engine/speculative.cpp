#include "engine/speculative.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "common/error.hpp"

namespace steermoe::engine {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Inverse-CDF draw from unnormalised weights (ties to the lower id); -1 when all are zero.
int32_t draw(std::span<const float> weights, double total, double u) {
  if (!(total > 0)) return -1;
  const double target = u * total;
  double sum = 0;
  int32_t last_positive = -1;
  for (size_t i = 0; i < weights.size(); ++i) {
    if (weights[i] <= 0) continue;
    sum += weights[i];
    last_positive = static_cast<int32_t>(i);
    if (target < sum) return last_positive;
  }
  return last_positive;  // rounding at the top end
}

}  // namespace

bool accept_draft(std::span<const float> p, std::span<const float> q, int32_t token, double u) {
  const auto t = static_cast<size_t>(token);
  SM_ASSERT(t < p.size() && p.size() == q.size());
  // A draft the drafter could not have produced (q = 0) is never accepted.
  if (!(q[t] > 0)) return false;
  return u < std::min(1.0, static_cast<double>(p[t]) / static_cast<double>(q[t]));
}

int32_t sample_residual(std::span<const float> p, std::span<const float> q, double u) {
  SM_ASSERT(p.size() == q.size());
  double total = 0;
  for (size_t i = 0; i < p.size(); ++i) total += std::max(0.0f, p[i] - q[i]);
  if (total > 0) {
    const double target = u * total;
    double sum = 0;
    int32_t last_positive = -1;
    for (size_t i = 0; i < p.size(); ++i) {
      const float r = std::max(0.0f, p[i] - q[i]);
      if (r <= 0) continue;
      sum += r;
      last_positive = static_cast<int32_t>(i);
      if (target < sum) return last_positive;
    }
    return last_positive;
  }
  // p == q: the draft was rejected only by rounding; p itself is the distribution.
  double p_total = 0;
  for (const float x : p) p_total += x;
  return draw(p, p_total, u);
}

void check_speculative_target(const model::ModelConfig& config) {
  if (config.linear_layer_count() > 0)
    fail(config.source, "speculative decoding",
         "expected a model without recurrent (Gated DeltaNet) layers: rejected drafts must be "
         "rolled back, and their state cannot be (Qwen3.5 / 3.6, Qwen3-Next)");
}

SpeculativeDecoder::SpeculativeDecoder(Engine& target, Engine& drafter, const SpecParams& params)
    : target_(target), drafter_(&drafter), params_(params), rng_(params.seed) {
  const model::ModelConfig& t = target.config();
  const model::ModelConfig& d = drafter.config();
  if (t.vocab != d.vocab)
    fail(d.source, "vocab",
         "expected the target's vocabulary of {} tokens ({}) for a drafter, found {}", t.vocab,
         t.source, d.vocab);
  check_speculative_target(d);
  size_buffers();
}

SpeculativeDecoder::SpeculativeDecoder(Engine& target, const SyntheticDraft& synthetic,
                                       const SpecParams& params)
    : target_(target), synthetic_(synthetic), params_(params), rng_(params.seed) {
  if (!(synthetic.acceptance >= 0 && synthetic.acceptance <= 1))
    fail("speculative", "--draft synthetic:A", "expected an acceptance A in [0, 1], found {}",
         synthetic.acceptance);
  if (!(synthetic.ms_per_token >= 0))
    fail("speculative", "--draft synthetic:A,MS", "expected a drafting cost MS >= 0, found {}",
         synthetic.ms_per_token);
  if (target.config().vocab < 2)
    fail(target.config().source, "vocab", "expected at least 2 tokens for synthetic drafts");
  size_buffers();
}

void SpeculativeDecoder::size_buffers() {
  if (params_.draft_k < 1 || params_.draft_k > 64)
    fail("speculative", "--draft-k", "expected 1..64, found {}", params_.draft_k);
  if (!(params_.temperature >= 0))
    fail("speculative", "--temp", "expected >= 0, found {}", params_.temperature);
  check_speculative_target(target_.config());
  const model::ModelConfig& t = target_.config();
  // On a link the block rules' slots were sized for a number of drafts (a block of draft_k + 1
  // positions executes at most OffloadConfig::block_slots experts per layer): more would not fit.
  const schedule::OffloadConfig& offload = target_.expert_cache().config();
  if (offload.block && offload.link.moves_experts() && offload.draft_k < params_.draft_k)
    fail("speculative", "--draft-k",
         "expected at most the {} drafts the target's verification slots were sized for "
         "(OffloadRequest::draft_k), found {}",
         offload.draft_k, params_.draft_k);
  const auto V = static_cast<size_t>(t.vocab);
  const auto k = static_cast<size_t>(params_.draft_k);
  block_.resize(k + 1);
  logits_.resize((k + 1) * V);
  draft_probs_.resize(k * V);
  p_.resize(V);
  alpha_.resize(k + 1);
  confidence_.resize(k);
  stats_.reached.assign(k, 0);
  stats_.accepted.assign(k, 0);
}

std::span<const float> SpeculativeDecoder::position_weights(int k) {
  const policy::BlockRule rule = target_.expert_cache().config().block->rule;
  alpha_[0] = 1.0f;  // the root position's token is always committed
  double confidence = 1.0;
  for (int d = 1; d <= k; ++d) {
    float a = 1.0f;
    if (rule == policy::BlockRule::kBlock) {
      // AcceptMoE: sqrt of the commitment rate at this depth, measured on this run so far
      // (Laplace-smoothed: a function of the token history, so deterministic).
      const double rate = (static_cast<double>(stats_.accepted[static_cast<size_t>(d) - 1]) + 1.0) /
                          (static_cast<double>(stats_.verifications) + 2.0);
      a = static_cast<float>(std::sqrt(rate));
    } else if (rule == policy::BlockRule::kBlockConf) {
      confidence *= confidence_[static_cast<size_t>(d) - 1];
      a = static_cast<float>(std::sqrt(confidence));
    }
    alpha_[static_cast<size_t>(d)] = a;
  }
  return {alpha_.data(), static_cast<size_t>(k) + 1};
}

void SpeculativeDecoder::probabilities(std::span<const float> logits,
                                       std::vector<float>& out) const {
  // softmax(logits / T) in double for the normaliser, float out.
  const float max = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    const double e = std::exp((static_cast<double>(logits[i]) - max) / params_.temperature);
    out[i] = static_cast<float>(e);
    sum += e;
  }
  for (float& x : out) x = static_cast<float>(x / sum);
}

int32_t SpeculativeDecoder::pick(std::span<const float> logits) {
  if (params_.temperature == 0) return argmax(logits);
  probabilities(logits, p_);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  return draw(p_, 1.0, uniform(rng_));
}

int32_t SpeculativeDecoder::begin(std::span<const int32_t> prompt) {
  if (prompt.empty()) fail("speculative", "prompt", "expected at least one token");
  if (drafter_ == nullptr)
    fail("speculative", "--draft synthetic",
         "a synthetic drafter follows a text: teacher forcing only (bench -f FILE or "
         "--scores-from TRACE, not --generate)");
  target_.reset();
  drafter_->reset();
  const std::span<const float> logits = target_.prefill(prompt);
  last_ = pick(logits);
  drafter_->prefill(prompt);  // its next input is last_, like the target's
  return last_;
}

std::span<const float> SpeculativeDecoder::begin_forced(std::span<const int32_t> prompt,
                                                        int32_t next) {
  if (prompt.empty()) fail("speculative", "prompt", "expected at least one token");
  target_.reset();
  if (drafter_ != nullptr) drafter_->reset();
  const std::span<const float> logits = target_.prefill(prompt);
  last_ = next;
  if (drafter_ != nullptr) drafter_->prefill(prompt);
  return logits;
}

int SpeculativeDecoder::draft_and_verify(int max_drafts, std::span<const int32_t> truth) {
  const int n = target_.position();
  SM_ASSERT_MSG(drafter_ == nullptr || drafter_->position() == n,
                "drafter and target out of step");
  const int room =
      (drafter_ != nullptr ? std::min(target_.context(), drafter_->context()) : target_.context()) -
      n - 1;
  if (room < 0) fail("speculative", "context", "the context of {} positions is full", n);
  const int k = std::min({params_.draft_k, room, max_drafts});
  const auto V = static_cast<size_t>(target_.config().vocab);
  const bool greedy = params_.temperature == 0;
  std::uniform_real_distribution<double> uniform(0.0, 1.0);

  // Draft k tokens (the drafter feeds last_, d1 .. d(k-1)).
  const auto t0 = Clock::now();
  block_[0] = last_;
  if (synthetic_) {
    // The text's token with probability `acceptance`, else another one; then the drafting cost.
    SM_ASSERT_MSG(truth.size() >= static_cast<size_t>(k), "synthetic drafts follow a text");
    const auto others = static_cast<uint64_t>(target_.config().vocab) - 1;
    for (int i = 0; i < k; ++i) {
      const int32_t right = truth[static_cast<size_t>(i)];
      int32_t d = right;
      if (!(uniform(rng_) < synthetic_->acceptance))
        d = static_cast<int32_t>((static_cast<uint64_t>(right) + 1 + rng_() % others) %
                                 (others + 1));
      block_[static_cast<size_t>(i) + 1] = d;
      confidence_[static_cast<size_t>(i)] = static_cast<float>(synthetic_->acceptance);
    }
    const auto until = t0 + std::chrono::duration_cast<Clock::duration>(
                                std::chrono::duration<double, std::milli>(
                                    synthetic_->ms_per_token * static_cast<double>(k)));
    while (Clock::now() < until) {
    }
  }
  for (int i = 0; i < k && !synthetic_; ++i) {
    const std::span<const float> dl = drafter_->decode(block_[static_cast<size_t>(i)]);
    int32_t d = 0;
    if (greedy) {
      d = argmax(dl);
      // The drafter's probability of its own token (block:conf weights): softmax at T = 1.
      const float max = dl[static_cast<size_t>(d)];
      double sum = 0;
      for (const float x : dl) sum += std::exp(static_cast<double>(x) - max);
      confidence_[static_cast<size_t>(i)] = static_cast<float>(1.0 / sum);
    } else {
      std::vector<float>& q = p_;
      probabilities(dl, q);
      std::copy(q.begin(), q.end(), draft_probs_.begin() + static_cast<ptrdiff_t>(i * V));
      d = draw(q, 1.0, uniform(rng_));
      confidence_[static_cast<size_t>(i)] = q[static_cast<size_t>(d)];
    }
    block_[static_cast<size_t>(i) + 1] = d;
  }
  stats_.drafted += k;
  stats_.draft_s += seconds_since(t0);

  // Verify the k+1 positions in one call; logits_ row i predicts the token after block_[i].
  const auto t1 = Clock::now();
  const std::span<const int32_t> block(block_.data(), static_cast<size_t>(k) + 1);
  const std::span<float> logits(logits_.data(), (static_cast<size_t>(k) + 1) * V);
  replayed_ = false;
  if (target_.verifies_in_blocks() && counterfactual_ && !truth.empty()) {
    // The same block with the text's tokens at the draft positions, from the same state (pools,
    // counts, KV), then undone: only its executed sets are kept.
    SM_ASSERT(truth.size() >= static_cast<size_t>(k));
    const std::span<const float> alpha = position_weights(k);
    truth_block_.assign(block.begin(), block.end());
    std::copy_n(truth.begin(), k, truth_block_.begin() + 1);
    truth_logits_.resize(logits.size());
    target_.save_blocks(checkpoint_);
    record_.clear();
    target_.set_recorder(&record_);
    target_.verify(truth_block_, alpha, truth_logits_);
    target_.set_recorder(nullptr);
    counterfactual_set_ = record_.selected;
    target_.rollback(n);
    target_.restore_blocks(checkpoint_);
    record_.clear();
    target_.set_recorder(&record_);
    replayed_ = true;
  }
  const CacheStats before = target_.cache_stats();
  if (target_.verifies_in_blocks()) {
    target_.verify(block, position_weights(k), logits);
    if (replayed_) target_.set_recorder(nullptr);
  } else {
    if (target_.rolls_back_routing()) target_.mark_rollback(k + 1);
    target_.prefill(block, logits);
  }
  const CacheStats copies = target_.cache_stats() - before;
  stats_.block_copies += copies.block_copies;
  stats_.verify_insertions += copies.logical_demand + copies.logical_prefetch;
  stats_.verify_s += seconds_since(t1);
  return k;
}

void SpeculativeDecoder::commit(int n, int k, int accepted, int32_t next,
                                std::vector<int32_t>* out) {
  // d1 .. d(accepted) and `next`; both engines forget the rejected positions.
  if (out != nullptr) {
    for (int i = 1; i <= accepted; ++i) out->push_back(block_[static_cast<size_t>(i)]);
    out->push_back(next);
  }
  const int64_t restored = target_.cache_stats().restore_copies;
  target_.rollback(n + accepted + 1);
  stats_.restore_copies += target_.cache_stats().restore_copies - restored;
  if (accepted < k) {
    if (drafter_ != nullptr) drafter_->rollback(n + accepted + 1);
  } else if (drafter_ != nullptr) {
    drafter_->decode(block_[static_cast<size_t>(k)]);  // its last draft, never fed
  }
  last_ = next;
  ++stats_.verifications;
  stats_.committed += accepted + 1;
}

int SpeculativeDecoder::step(std::vector<int32_t>& out) {
  if (drafter_ == nullptr)
    fail("speculative", "--draft synthetic", "a synthetic drafter follows a text: step_forced only");
  const int n = target_.position();
  const int k = draft_and_verify(params_.draft_k);
  const auto V = static_cast<size_t>(target_.config().vocab);
  const bool greedy = params_.temperature == 0;
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  const auto t1 = Clock::now();
  int a = 0;
  int32_t next = 0;
  for (;; ++a) {
    const std::span<const float> row(&logits_[static_cast<size_t>(a) * V], V);
    if (a == k) {  // every draft accepted: the target's own next token
      next = pick(row);
      break;
    }
    ++stats_.reached[static_cast<size_t>(a)];
    const int32_t draft = block_[static_cast<size_t>(a) + 1];
    if (greedy) {
      next = argmax(row);
      if (next != draft) break;
    } else {
      probabilities(row, p_);
      const std::span<const float> q(&draft_probs_[static_cast<size_t>(a) * V], V);
      if (!accept_draft(p_, q, draft, uniform(rng_))) {
        next = sample_residual(p_, q, uniform(rng_));
        break;
      }
    }
    ++stats_.accepted[static_cast<size_t>(a)];
  }
  stats_.verify_s += seconds_since(t1);
  commit(n, k, a, next, &out);
  return a + 1;
}

void SpeculativeDecoder::count_replay(int accepted) {
  // Rows [position][layer][K], each layer's executed experts ascending: a set differs when any
  // entry does.
  const auto row = static_cast<size_t>(record_.moe_layers) * static_cast<size_t>(record_.top_k);
  const auto K = static_cast<size_t>(record_.top_k);
  SM_ASSERT(record_.selected.size() == counterfactual_set_.size());
  for (int t = 0; t <= accepted; ++t) {
    for (int m = 0; m < record_.moe_layers; ++m) {
      const size_t off = static_cast<size_t>(t) * row + static_cast<size_t>(m) * K;
      stats_.replay_layers += 1;
      stats_.replay_differs +=
          std::equal(record_.selected.begin() + static_cast<ptrdiff_t>(off),
                     record_.selected.begin() + static_cast<ptrdiff_t>(off + K),
                     counterfactual_set_.begin() + static_cast<ptrdiff_t>(off))
              ? 0
              : 1;
    }
  }
}

int SpeculativeDecoder::step_forced(std::span<const int32_t> text, std::span<float> logits) {
  if (text.empty()) fail("speculative", "text", "expected at least one token to commit");
  const int n = target_.position();
  const int k = draft_and_verify(static_cast<int>(text.size()) - 1, text);
  const auto V = static_cast<size_t>(target_.config().vocab);
  SM_ASSERT(logits.size() >= (static_cast<size_t>(k) + 1) * V);
  int a = 0;
  for (; a < k; ++a) {
    ++stats_.reached[static_cast<size_t>(a)];
    if (block_[static_cast<size_t>(a) + 1] != text[static_cast<size_t>(a)]) break;
    ++stats_.accepted[static_cast<size_t>(a)];
  }
  std::copy_n(logits_.begin(), (static_cast<size_t>(a) + 1) * V, logits.begin());
  if (replayed_) count_replay(a);
  commit(n, k, a, text[static_cast<size_t>(a)], nullptr);
  return a + 1;
}

std::unique_ptr<SpeculativeDecoder> make_speculative_decoder(
    Engine& target, Engine* drafter, const std::optional<SyntheticDraft>& synthetic,
    const SpecParams& params) {
  if (synthetic) return std::make_unique<SpeculativeDecoder>(target, *synthetic, params);
  SM_ASSERT_MSG(drafter != nullptr, "a speculative decoder needs a drafter");
  return std::make_unique<SpeculativeDecoder>(target, *drafter, params);
}

}  // namespace steermoe::engine
