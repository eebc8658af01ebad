#include "eval/kl.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <memory>

#include "common/error.hpp"
#include "engine/speculative.hpp"
#include "eval/perplexity.hpp"
#include "eval/stats.hpp"

namespace steermoe::eval {

namespace {

// log-sum-exp of a logit row in double (index order).
double log_sum_exp(std::span<const float> logits) {
  double max_logit = logits[0];
  for (float v : logits) max_logit = std::max<double>(max_logit, v);
  double sum = 0.0;
  for (float v : logits) sum += std::exp(static_cast<double>(v) - max_logit);
  return max_logit + std::log(sum);
}

size_t argmax(std::span<const float> row) {
  return static_cast<size_t>(std::max_element(row.begin(), row.end()) - row.begin());
}

}  // namespace

double kl_from_logits(std::span<const float> p_logits, std::span<const float> q_logits) {
  SM_ASSERT(p_logits.size() == q_logits.size() && !p_logits.empty());
  const double lp = log_sum_exp(p_logits), lq = log_sum_exp(q_logits);
  double kl = 0.0;
  for (size_t i = 0; i < p_logits.size(); ++i) {
    const double log_p = p_logits[i] - lp;
    const double log_q = q_logits[i] - lq;
    kl += std::exp(log_p) * (log_p - log_q);
  }
  return std::max(kl, 0.0);  // rounding can leave a tiny negative sum for equal rows
}

std::vector<KlRow> kl_divergence(engine::Engine& exact, std::span<engine::Engine* const> configs,
                                 int vocab, std::span<const int32_t> ids, const KlOptions& options,
                                 const std::function<void(int64_t, int64_t)>& progress) {
  if (options.window < 2) fail("kl", "--window-len", "expected >= 2, found {}", options.window);
  if (ids.size() < 2) fail("kl", "text", "expected at least 2 tokens, found {}", ids.size());
  const auto V = static_cast<size_t>(vocab);
  const auto W = static_cast<size_t>(options.window);
  int64_t total_windows = static_cast<int64_t>((ids.size() - 1 + W - 1) / W);
  if (options.max_windows > 0)
    total_windows = std::min<int64_t>(total_windows, options.max_windows);

  struct Acc {
    std::vector<double> window_kl;
    double nll = 0;
    int64_t agree = 0;
    engine::CacheStats start;
  };
  std::vector<Acc> acc(configs.size());
  for (size_t c = 0; c < configs.size(); ++c) acc[c].start = configs[c]->cache_stats();
  std::vector<std::unique_ptr<engine::SpeculativeDecoder>> spec(configs.size());
  if (options.drafter != nullptr || options.synthetic) {
    for (size_t c = 0; c < configs.size(); ++c) {
      spec[c] = engine::make_speculative_decoder(*configs[c], options.drafter, options.synthetic,
                                                 {.draft_k = options.draft_k});
      if (options.counterfactual) {
        if (!configs[c]->verifies_in_blocks())
          fail("kl", "--counterfactual",
               "expected a block rule (--spec-select exact, block or block:conf), found {}",
               configs[c]->rolls_back_routing() ? "rollback" : "policy");
        spec[c]->set_counterfactual(true);
      }
    }
  }
  std::vector<float> ref(W * V), got(W * V);
  double exact_nll = 0;
  int64_t scored = 0;
  int64_t done = 0;
  for (size_t begin = 0; begin + 1 < ids.size() && done < total_windows; begin += W, ++done) {
    const size_t n = std::min(W, ids.size() - begin);
    if (n < 2) break;
    const std::span<const int32_t> window = ids.subspan(begin, n);
    exact.reset();
    exact.prefill(window, std::span<float>(ref.data(), n * V));
    for (size_t i = 0; i + 1 < n; ++i) exact_nll += token_nll({&ref[i * V], V}, window[i + 1]);
    scored += static_cast<int64_t>(n - 1);
    for (size_t c = 0; c < configs.size(); ++c) {
      if (spec[c]) {
        // The window's first token is the prompt; every later position is committed by a
        // verification block (row i of `got` predicts window[i + 1], as for prefill).
        const std::span<const float> first = spec[c]->begin_forced(window.first(1), window[1]);
        std::copy(first.begin(), first.end(), got.begin());
        for (size_t pos = 1; pos + 1 < n;)
          pos += static_cast<size_t>(spec[c]->step_forced(
              window.subspan(pos + 1), std::span<float>(got.data() + pos * V, (n - pos) * V)));
      } else {
        configs[c]->reset();
        configs[c]->prefill(window, std::span<float>(got.data(), n * V));
      }
      double window_kl = 0;
      for (size_t i = 0; i + 1 < n; ++i) {
        const std::span<const float> p(&ref[i * V], V), q(&got[i * V], V);
        window_kl += kl_from_logits(p, q);
        acc[c].nll += token_nll(q, window[i + 1]);
        acc[c].agree += argmax(p) == argmax(q) ? 1 : 0;
      }
      acc[c].window_kl.push_back(window_kl / static_cast<double>(n - 1));
    }
    if (progress) progress(done + 1, total_windows);
  }
  std::vector<KlRow> rows;
  for (size_t c = 0; c < configs.size(); ++c) {
    const engine::Engine& e = *configs[c];
    KlRow r;
    r.policy = e.policy().to_string();
    r.cache = e.cache_slots();
    r.tokens = scored;
    r.windows = static_cast<int64_t>(acc[c].window_kl.size());
    // The interval treats windows (independent sequences) as the unit; tokens within a window
    // are correlated. Windows are weighted equally (all but the last have the same length).
    const MeanInterval mi = mean_t_interval(acc[c].window_kl);
    r.kl_mean = mi.mean;
    // KL is never negative: a t-interval over few, spread windows can reach below 0; the part
    // below is impossible, so the interval stops at 0 (its coverage only grows).
    r.kl_ci_low = std::max(mi.ci_low, 0.0);
    r.kl_ci_high = mi.ci_high;
    r.perplexity = std::exp(acc[c].nll / static_cast<double>(scored));
    r.exact_perplexity = std::exp(exact_nll / static_cast<double>(scored));
    r.top1_agreement = static_cast<double>(acc[c].agree) / static_cast<double>(scored);
    const engine::CacheStats d = e.cache_stats() - acc[c].start;
    const double routed = static_cast<double>(d.routed_tokens);
    const double picks =
        static_cast<double>(d.layer_steps) * static_cast<double>(e.router_spec().top_k);
    r.replaced_fraction = picks > 0 ? static_cast<double>(d.replaced) / picks : 0;
    // Per token the configuration routed; under speculative decoding per committed token (the
    // verification blocks route more positions than they commit).
    const double per = spec[c] ? static_cast<double>(scored) : routed;
    r.copies_per = static_cast<int64_t>(per);
    r.demand_per_token = per > 0 ? static_cast<double>(d.logical_demand) / per : 0;
    r.prefetch_per_token = per > 0 ? static_cast<double>(d.logical_prefetch) / per : 0;
    if (spec[c]) {
      r.tau = spec[c]->stats().tau();
      r.block_per_token = static_cast<double>(d.block_copies) / per;
      r.restore_per_token = static_cast<double>(d.restore_copies) / per;
      const engine::SpecStats& st = spec[c]->stats();
      r.replay_layers = st.replay_layers;
      r.replay_differs = st.replay_layers > 0 ? static_cast<double>(st.replay_differs) /
                                                    static_cast<double>(st.replay_layers)
                                              : 0.0;
    }
    rows.push_back(r);
  }
  return rows;
}

nlohmann::json kl_json(std::span<const KlRow> rows) {
  nlohmann::json configs = nlohmann::json::array();
  for (const KlRow& r : rows) {
    configs.push_back(
        {{"policy", r.policy},
         {"cache", r.cache},
         {"tokens", r.tokens},
         {"windows", r.windows},
         {"kl", {{"mean", r.kl_mean}, {"ci_low", r.kl_ci_low}, {"ci_high", r.kl_ci_high}}},
         {"perplexity", r.perplexity},
         {"exact_perplexity", r.exact_perplexity},
         {"top1_agreement", r.top1_agreement},
         {"replaced_fraction", r.replaced_fraction},
         {"copies_over_tokens", r.copies_per},
         {"copies_per_token",
          {{"demand", r.demand_per_token},
           {"prefetch", r.prefetch_per_token},
           {"block", r.block_per_token},
           {"restore", r.restore_per_token},
           {"total", r.demand_per_token + r.prefetch_per_token + r.block_per_token +
                         r.restore_per_token}}}});
    if (r.tau > 0) configs.back()["speculative"] = {{"tau", r.tau}};
    if (r.replay_layers > 0)
      configs.back()["speculative"]["counterfactual"] = {
          {"committed_token_layers", r.replay_layers},
          {"differing_share", r.replay_differs}};
  }
  return {{"schema", "steermoe.kl/1"}, {"configurations", configs}};
}

std::string kl_table(std::span<const KlRow> rows) {
  std::string out =
      "| policy | cache | KL (nats/token) [95% CI] | ppl | exact ppl | top-1 agree | replaced | "
      "copies/token (demand + prefetch, + block + restore under --draft) |\n| --- | --- | --- | "
      "--- | --- | --- | --- | --- |\n";
  for (const KlRow& r : rows) {
    out += fmt::format(
        "| {} | {} | {:.5f} {} | {:.3f} | {:.3f} | {:.4f} | {:.2f}% | "
        "{:.2f} + {:.2f}{} |\n",
        r.policy, r.cache, r.kl_mean,
        // One window has no spread to make an interval from (the JSON holds null).
        std::isfinite(r.kl_ci_low) && std::isfinite(r.kl_ci_high)
            ? fmt::format("[{:.5f}, {:.5f}]", r.kl_ci_low, r.kl_ci_high)
            : std::string("[no interval: one window]"),
        r.perplexity, r.exact_perplexity, r.top1_agreement, 100.0 * r.replaced_fraction,
        r.demand_per_token, r.prefetch_per_token,
        r.tau > 0 ? fmt::format(" + {:.2f} block + {:.2f} restore; tau {:.2f}{}", r.block_per_token,
                                r.restore_per_token, r.tau,
                                r.replay_layers > 0
                                    ? fmt::format("; wrong drafts change {:.1f}% of committed "
                                                  "token-layers' sets",
                                                  100.0 * r.replay_differs)
                                    : std::string())
                  : std::string());
  }
  return out;
}

}  // namespace steermoe::eval
