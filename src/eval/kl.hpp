// KL divergence from exact routing: every configuration and exact routing score the same
// teacher-forced windows; per token KL(p_exact || p_config) of the next-token distributions,
// perplexity of both, top-1 agreement, the fraction of the router's top-K the policy replaced
// and the policy's logical copies per token. The computation behind `steermoe kl`.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/engine.hpp"
#include "engine/speculative.hpp"

namespace steermoe::eval {

struct KlOptions {
  int window = 256;     // tokens per window (each a fresh sequence)
  int max_windows = 0;  // 0: all
  // Speculative decoding (`kl --draft`): every configuration verifies this drafter's `draft_k`
  // drafts under teacher forcing (engine/speculative.hpp, step_forced: the committed tokens are
  // the window's; its verification rule is the configuration's --spec-select). Exact routing
  // stays plain decoding, the reference.
  engine::Engine* drafter = nullptr;
  std::optional<engine::SyntheticDraft> synthetic;  // instead of a drafter model
  int draft_k = 4;
  // With a drafter and a block rule: SpeculativeDecoder::set_counterfactual (the share of
  // committed token-layers whose executed set the rejected drafts changed).
  bool counterfactual = false;
};

struct KlRow {
  std::string policy;  // canonical policy string
  int cache = 0;
  int64_t tokens = 0;   // scored tokens
  // The tokens copies_per_token divides by: every routed token (a window's last is routed but
  // not scored), or under a drafter the scored (committed) ones.
  int64_t copies_per = 0;
  int64_t windows = 0;  // repetitions for the interval
  double kl_mean = 0;   // nats per token
  double kl_ci_low = 0, kl_ci_high = 0;  // 95% t interval over per-window means
  double perplexity = 0;
  double exact_perplexity = 0;
  double top1_agreement = 0;     // argmax equal to exact routing's
  double replaced_fraction = 0;  // of router top-K picks, over every routed token
  double demand_per_token = 0;   // logical copies per token
  double prefetch_per_token = 0;
  // With a drafter (copies above per committed token too): tokens per verification, the
  // verification blocks' copies and rollback's restores per committed token.
  double tau = 0;
  double block_per_token = 0;
  double restore_per_token = 0;
  // With KlOptions::counterfactual: committed (token, MoE layer) pairs compared, and the share
  // whose executed expert set differs when rejected positions carry the text's tokens.
  int64_t replay_layers = 0;
  double replay_differs = 0;
};

// KL(p || q) for two logit rows, in double (softmax of each, vocabulary in index order).
double kl_from_logits(std::span<const float> p_logits, std::span<const float> q_logits);

// `exact` runs exact routing (all experts resident); configs[i] the configurations. Every
// engine's context must be >= options.window. `progress(done, total)` after each window.
std::vector<KlRow> kl_divergence(engine::Engine& exact, std::span<engine::Engine* const> configs,
                                 int vocab, std::span<const int32_t> ids, const KlOptions& options,
                                 const std::function<void(int64_t, int64_t)>& progress = {});

// The `kl --json` document (schema steermoe.kl/1).
nlohmann::json kl_json(std::span<const KlRow> rows);
// Markdown table of the rows.
std::string kl_table(std::span<const KlRow> rows);

}  // namespace steermoe::eval
