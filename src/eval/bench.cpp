#include "eval/bench.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "common/error.hpp"
#include "eval/stats.hpp"

namespace steermoe::eval {

namespace {

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double rank = std::ceil(q * static_cast<double>(v.size()));
  const size_t i = static_cast<size_t>(std::clamp(rank, 1.0, static_cast<double>(v.size()))) - 1;
  return v[i];
}

size_t argmax(std::span<const float> row) {
  return static_cast<size_t>(std::max_element(row.begin(), row.end()) - row.begin());
}

// Copies, stalls and link figures of `sum` per token, dividing by `per_token` tokens (decode
// tokens; committed tokens under speculative decoding, whose verification positions are not
// tokens of the output).
void copy_figures(BenchRound& r, const engine::CacheStats& sum, double per_token, double total_ms,
                  const engine::Engine& e) {
  const double st = std::max(per_token, 1.0);
  if (sum.physical) {
    r.physical = true;
    r.demand = static_cast<double>(sum.demand) / st;
    r.prefetch = static_cast<double>(sum.prefetch) / st;
    r.emitted = static_cast<double>(sum.prefetch_emitted) / st;
    r.in_time = static_cast<double>(sum.prefetch_in_time) / st;
    r.late = static_cast<double>(sum.prefetch_late) / st;
    r.unused = static_cast<double>(sum.prefetch_unused) / st;
    r.dropped = static_cast<double>(sum.prefetch_dropped) / st;
    r.stall_ms = sum.stall_s * 1e3 / st;
    r.stall_demand_ms = sum.stall_demand_s * 1e3 / st;
    r.stall_prefetch_ms = sum.stall_prefetch_s * 1e3 / st;
    r.stall_other_ms = sum.stall_other_s * 1e3 / st;
    r.host_ms = sum.host_s * 1e3 / st;
    r.attention_ms = sum.attention_s * 1e3 / st;
    r.moe_ms = sum.moe_s * 1e3 / st;
    r.link_clock_ms = sum.latency_s * 1e3 / st;
    r.link_gb_per_s = total_ms > 0 ? static_cast<double>(sum.bytes) / (total_ms * 1e-3) / 1e9 : 0.0;
    r.link_busy_gb_per_s =
        sum.link_busy_s > 0 ? static_cast<double>(sum.bytes) / sum.link_busy_s / 1e9 : 0.0;
    if (e.expert_cache().kind() == engine::LinkKind::kSim) r.sim_mean_ms = sum.latency_s * 1e3 / st;
  } else {
    r.demand = static_cast<double>(sum.logical_demand) / st;
    r.prefetch = static_cast<double>(sum.logical_prefetch) / st;
  }
}

// Speculative decoding of every prompt (with generate) or teacher forced over every window
// (its first token the prompt, drafts accepted while they equal the text): per-token latency is
// each verification's time (drafting included) spread over the tokens it committed; copies,
// stalls and link time are per committed token (the prompt's copies stay out, as for plain
// decoding).
BenchRound run_speculative_round(engine::Engine& e, std::span<const std::vector<int32_t>> prompts,
                                 const BenchOptions& options, int round) {
  using Clock = std::chrono::steady_clock;
  BenchRound r;
  r.round = round;
  std::vector<double> ms;
  const std::unique_ptr<engine::SpeculativeDecoder> decoder = engine::make_speculative_decoder(
      e, options.drafter, options.synthetic, {.draft_k = options.draft_k});
  engine::SpeculativeDecoder& sd = *decoder;
  engine::CacheStats sum;
  std::vector<int32_t> out;
  std::vector<float> logits;  // teacher forcing: the verified rows (unused here)
  if (options.generate == 0)
    logits.resize(static_cast<size_t>(options.draft_k + 1) * static_cast<size_t>(e.config().vocab));
  const auto time_step = [&](auto&& step) {
    const auto t0 = Clock::now();
    const int committed = step();
    const double each =
        std::chrono::duration<double, std::milli>(Clock::now() - t0).count() / committed;
    for (int i = 0; i < committed; ++i) ms.push_back(each);
    return committed;
  };
  for (size_t index = 0; index < prompts.size(); ++index) {
    const std::span<const int32_t> seq = prompts[index];
    if (options.generate == 0 && seq.size() < 3) continue;  // nothing to verify
    if (options.before_sequence) options.before_sequence(index);
    engine::CacheStats before;
    if (options.generate > 0) {
      out.clear();
      out.push_back(sd.begin(seq));
      before = e.cache_stats();
      while (static_cast<int>(out.size()) < options.generate)
        time_step([&] { return sd.step(out); });
    } else {
      sd.begin_forced(seq.first(1), seq[1]);
      before = e.cache_stats();
      for (size_t pos = 1; pos + 1 < seq.size();)
        pos += static_cast<size_t>(
            time_step([&] { return sd.step_forced(seq.subspan(pos + 1), logits); }));
    }
    sum += e.cache_stats() - before;
  }
  const engine::SpecStats& s = sd.stats();
  const double committed = static_cast<double>(std::max<int64_t>(s.committed, 1));
  r.tokens = static_cast<int64_t>(ms.size());
  double total_ms = 0;
  for (double v : ms) total_ms += v;
  r.mean_ms = total_ms / std::max<double>(static_cast<double>(r.tokens), 1.0);
  r.p50_ms = percentile(ms, 0.5);
  r.p99_ms = percentile(ms, 0.99);
  if (options.token_ms) r.token_ms = ms;
  copy_figures(r, sum, committed, total_ms, e);
  r.tau = s.tau();
  // On a link, the experts a block copied (the slots keep more than the pool); else the logical
  // count of set members outside the pool.
  r.block_copies =
      static_cast<double>(sum.physical ? sum.block_copied : sum.block_copies) / committed;
  // Rollback: slots the policy gave back their expert (logical), of which a link copied again
  // those whose physical content differed.
  r.restore_copies =
      static_cast<double>(sum.physical ? sum.restore_copied : sum.restore_copies) / committed;
  r.block_prefetched = static_cast<double>(sum.block_prefetched) / committed;
  r.draft_ms = s.draft_s * 1e3 / committed;
  r.verify_ms = s.verify_s * 1e3 / committed;
  r.acceptance.resize(s.reached.size());
  for (size_t d = 0; d < s.reached.size(); ++d)
    r.acceptance[d] = s.reached[d] > 0
                          ? static_cast<double>(s.accepted[d]) / static_cast<double>(s.reached[d])
                          : 0.0;
  return r;
}

BenchRound run_round(engine::Engine& e, std::span<const std::vector<int32_t>> sequences,
                     const BenchOptions& options, int round) {
  if (options.drafter != nullptr || options.synthetic)
    return run_speculative_round(e, sequences, options, round);
  using Clock = std::chrono::steady_clock;
  BenchRound r;
  r.round = round;
  std::vector<double> ms;
  engine::CacheStats sum;  // decode figures of every sequence (the prompt's stay out)
  for (size_t index = 0; index < sequences.size(); ++index) {
    const std::vector<int32_t>& seq = sequences[index];
    if (options.before_sequence) options.before_sequence(index);
    e.reset();  // warm-up copies: prompt time, not in the figures
    std::span<const float> logits;
    // With --generate the prompt is processed first, outside the figures.
    if (options.generate > 0) logits = e.prefill(seq);
    const engine::CacheStats before = e.cache_stats();
    if (options.decoding) options.decoding(index, true);
    if (options.generate > 0) {
      for (int i = 0; i < options.generate; ++i) {
        const auto next = static_cast<int32_t>(argmax(logits));
        const auto t0 = Clock::now();
        logits = e.decode(next);
        ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
      }
    } else {
      for (const int32_t token : seq) {
        const auto t0 = Clock::now();
        e.decode(token);
        ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
      }
    }
    if (options.decoding) options.decoding(index, false);
    sum += e.cache_stats() - before;
  }
  r.tokens = static_cast<int64_t>(ms.size());
  double total_ms = 0;
  for (double v : ms) total_ms += v;
  r.mean_ms = total_ms / std::max<double>(static_cast<double>(r.tokens), 1.0);
  r.p50_ms = percentile(ms, 0.5);
  r.p99_ms = percentile(ms, 0.99);
  if (options.token_ms) r.token_ms = ms;
  copy_figures(r, sum, static_cast<double>(sum.physical ? sum.tokens : sum.routed_tokens), total_ms,
               e);
  return r;
}

}  // namespace

std::vector<BenchResult> run_bench(
    std::span<const BenchConfig> configs,
    const std::function<std::unique_ptr<engine::Engine>(size_t)>& make_engine,
    std::span<const std::vector<int32_t>> sequences, const BenchOptions& options,
    const std::function<void(int64_t, int64_t)>& progress) {
  if (configs.empty()) fail("bench", "--policy", "expected at least one configuration");
  if (sequences.empty()) fail("bench", "windows", "expected at least one window of tokens");
  if (options.rounds < 1) fail("bench", "--rounds", "expected >= 1, found {}", options.rounds);
  std::vector<BenchResult> results(configs.size());
  for (size_t c = 0; c < configs.size(); ++c) results[c].config = configs[c];
  if (options.warmup_rounds < 0)
    fail("bench", "--warmup", "expected >= 0, found {}", options.warmup_rounds);
  const auto count = static_cast<int64_t>(configs.size());
  int64_t runnable = 0;
  for (const BenchConfig& c : configs) runnable += c.unavailable.empty() ? 1 : 0;
  const int64_t total = runnable * (options.rounds + options.warmup_rounds);
  int64_t done = 0;
  for (int round = -options.warmup_rounds; round < options.rounds; ++round) {
    for (int64_t i = 0; i < count; ++i) {
      const auto c = static_cast<size_t>(((i + round) % count + count) % count);
      if (!configs[c].unavailable.empty()) continue;
      std::unique_ptr<engine::Engine> e = make_engine(c);
      // Recording computes pre-gate scores even where the policy needs none: done in the last
      // warm-up round when there is one, so the timed rounds do not pay for it.
      const bool record = options.record_routing && round == (options.warmup_rounds > 0 ? -1 : 0);
      if (record) e->set_recorder(&results[c].record);
      if (round >= 0 && options.before_round) options.before_round(c, round);
      std::shared_ptr<void> beside = options.beside ? options.beside(c) : nullptr;
      BenchRound r = run_round(*e, sequences, options, round);
      beside.reset();
      if (record) e->set_recorder(nullptr);
      if (round >= 0) results[c].rounds.push_back(std::move(r));  // warm-up rounds: untimed
      if (progress) progress(++done, total);
    }
  }
  return results;
}

nlohmann::json bench_json(std::span<const BenchResult> results, const nlohmann::json& header) {
  nlohmann::json doc = header;
  doc["schema"] = "steermoe.bench/1";
  nlohmann::json configs = nlohmann::json::array();
  for (const BenchResult& b : results) {
    nlohmann::json rounds = nlohmann::json::array();
    for (const BenchRound& r : b.rounds) {
      // Stalls, policy time, compute and the link's rates are measured only where a link moves
      // experts (a scheduler times the layers); elsewhere they are null, not 0. The prefetch
      // split: in_time + late + unused = emitted; dropped: of the emitted, never copied.
      const auto timed = [&](nlohmann::json v) { return r.physical ? v : nlohmann::json(nullptr); };
      nlohmann::json j{
          {"round", r.round},
          {"tokens", r.tokens},
          {"ms_per_token", {{"mean", r.mean_ms}, {"p50", r.p50_ms}, {"p99", r.p99_ms}}},
          {"copies_per_token",
           {{"demand", r.demand}, {"prefetch", r.prefetch}, {"total", r.demand + r.prefetch}}},
          {"copies_source", r.physical ? "scheduler" : "logical"},
          {"prefetch_per_token", timed({{"emitted", r.emitted},
                                        {"in_time", r.in_time},
                                        {"late", r.late},
                                        {"unused", r.unused},
                                        {"dropped", r.dropped}})},
          {"stall_ms_per_token", timed({{"total", r.stall_ms},
                                        {"demand", r.stall_demand_ms},
                                        {"prefetch", r.stall_prefetch_ms},
                                        {"other", r.stall_other_ms}})},
          // Verification blocks route through the block selector, which the link's clock does
          // not time as policy (host) time.
          {"host_ms_per_token", r.tau > 0 ? nlohmann::json(nullptr) : timed(r.host_ms)},
          // attention and moe: the MoE layers' A(l) and M(l); rest: the token's other time (the
          // head, dense layers, embedding; drafting under --draft), so that stall + host +
          // attention + moe + rest = the mean (the simulator's compute includes the head too).
          {"compute_ms_per_token",
           timed({{"attention", r.attention_ms},
                  {"moe", r.moe_ms},
                  {"rest", std::max(0.0, r.mean_ms - r.stall_ms - r.host_ms - r.attention_ms -
                                             r.moe_ms)}})},
          {"link_gb_per_s", timed(r.link_gb_per_s)},
          {"link_busy_gb_per_s", timed(r.link_busy_gb_per_s)}};
      if (r.sim_mean_ms > 0) j["sim_ms_per_token"] = r.sim_mean_ms;
      if (r.tau > 0) {
        // Every copy figure of the round is per committed token; a verification block's copies
        // and rollback's restores are kinds of their own.
        j["copies_per_token"]["block"] = r.block_copies;
        j["copies_per_token"]["restore"] = r.restore_copies;
        j["copies_per_token"]["total"] = r.demand + r.prefetch + r.block_copies + r.restore_copies;
        j["speculative"] = {{"tau", r.tau},
                            {"acceptance_per_depth", r.acceptance},
                            {"block_copies_per_token", r.block_copies},
                            {"block_prefetched_per_token", r.block_prefetched},
                            {"restore_copies_per_token", r.restore_copies},
                            {"draft_ms_per_token", r.draft_ms},
                            {"verify_ms_per_token", r.verify_ms}};
      }
      if (!r.token_ms.empty()) j["token_ms"] = r.token_ms;
      rounds.push_back(std::move(j));
    }
    configs.push_back({{"name", b.config.name},
                       {"policy", b.config.policy},
                       {"cache", b.config.cache},
                       {"residency", b.config.residency},
                       {"link", b.config.link},
                       {"resident", b.config.resident},
                       {"unavailable", b.config.unavailable},
                       {"rounds", rounds}});
  }
  doc["configurations"] = configs;
  return doc;
}

std::string bench_table(std::span<const BenchResult> results) {
  auto means = [](const BenchResult& b) {
    std::vector<double> v;
    for (const BenchRound& r : b.rounds) v.push_back(r.mean_ms);
    return v;
  };
  auto avg = [](const BenchResult& b, double BenchRound::*field) {
    double s = 0;
    for (const BenchRound& r : b.rounds) s += r.*field;
    return b.rounds.empty() ? 0.0 : s / static_cast<double>(b.rounds.size());
  };
  // Speed-ups are against the first non-floor configuration (usually exact LRU), paired by round.
  const BenchResult* base = nullptr;
  for (const BenchResult& b : results)
    if (!b.config.resident && b.config.unavailable.empty()) {
      base = &b;
      break;
    }
  std::string out =
      "| configuration | ms/token mean [95% CI over rounds] | p50 | p99 | speed-up vs first | "
      "copies/token demand + prefetch (late, unused: of the emitted prefetches) | stall ms | "
      "host ms (% of token) |\n"
      "| --- | --- | --- | --- | --- | --- | --- | --- |\n";
  for (const BenchResult& b : results) {
    if (!b.config.unavailable.empty()) {
      out += fmt::format("| {} | {} | | | | | | |\n", b.config.name, b.config.unavailable);
      continue;
    }
    const std::vector<double> m = means(b);
    const MeanInterval mi = mean_t_interval(m);
    std::string speedup = "-";
    if (base != nullptr && base != &b && means(*base).size() == m.size() && m.size() >= 2) {
      const RatioResult rr = latency_ratio(m, means(*base));
      speedup = fmt::format("{:.2f}x [{:.2f}, {:.2f}]", rr.ratio, rr.ci_low, rr.ci_high);
    } else if (base != nullptr && base != &b && !m.empty()) {
      speedup =
          fmt::format("{:.2f}x", avg(*base, &BenchRound::mean_ms) / avg(b, &BenchRound::mean_ms));
    }
    const double host = avg(b, &BenchRound::host_ms);
    const double mean = avg(b, &BenchRound::mean_ms);
    // Speculative rows: their block and restore copies, and tokens per verification.
    std::string extra;
    if (avg(b, &BenchRound::tau) > 0)
      extra = fmt::format(" + {:.2f} block + {:.2f} restore; tau {:.2f}",
                          avg(b, &BenchRound::block_copies), avg(b, &BenchRound::restore_copies),
                          avg(b, &BenchRound::tau));
    // One round has no interval: say so rather than print a zero-width one.
    // Latency is never negative: a t-interval over 2-3 spread rounds can reach below 0, which
    // is impossible, so the interval stops at 0 (its coverage only grows).
    const std::string interval =
        m.size() >= 2 ? fmt::format("[{:.3f}, {:.3f}]", std::max(mi.ci_low, 0.0), mi.ci_high)
                      : std::string("[n/a: 1 round]");
    // Without a link that moves experts nothing is timed but the token: the copies are the
    // logical insertions, and stall and policy time are not measured ("-", not 0).
    const bool timed = !b.rounds.empty() && b.rounds.front().physical;
    const std::string copies =
        timed ? fmt::format("{:.2f} + {:.2f} ({:.2f}, {:.2f}){}", avg(b, &BenchRound::demand),
                            avg(b, &BenchRound::prefetch), avg(b, &BenchRound::late),
                            avg(b, &BenchRound::unused), extra)
              : fmt::format("{:.2f} + {:.2f} (logical: no link){}", avg(b, &BenchRound::demand),
                            avg(b, &BenchRound::prefetch), extra);
    const std::string stall_host =
        timed ? fmt::format("{:.3f} | {:.4f} ({:.2f}%)", avg(b, &BenchRound::stall_ms), host,
                            mean > 0 ? 100.0 * host / mean : 0.0)
              : std::string("- | -");
    out += fmt::format("| {} | {:.3f} {} | {:.3f} | {:.3f} | {} | {} | {} |\n", b.config.name, mean,
                       interval, avg(b, &BenchRound::p50_ms), avg(b, &BenchRound::p99_ms), speedup,
                       copies, stall_host);
  }
  return out;
}

}  // namespace steermoe::eval
