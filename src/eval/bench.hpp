// The latency protocol (`steermoe bench`): teacher-forced decoding over text windows (or greedy
// generation from prompts), every configuration over the same tokens, configurations interleaved
// within each round (the starting configuration rotates from round to round), one fresh engine
// per (round, configuration) so that no configuration inherits another's warm state. Per round:
// mean, p50 and p99 ms/token, copies per token by kind, stall by cause, host policy time.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "engine/engine.hpp"
#include "engine/speculative.hpp"

namespace steermoe::eval {

struct BenchConfig {
  std::string name;    // label ("psr:lambda=0.3,n=1@32 disk")
  std::string policy;  // policy string
  int cache = 0;       // C
  double residency = 0;
  std::string link;       // --link value
  bool resident = false;  // the all-experts-resident floor row
  // Non-empty: not run, and why ("does not fit: ..."); reported as such.
  std::string unavailable;
};

struct BenchOptions {
  int rounds = 3;
  // Untimed rounds per configuration before the first timed one, each on a fresh engine: the
  // weights read through the page cache (non-expert weights; every weight of the floor row) are
  // then in memory when timing starts, so the floor row measures compute, not page faults.
  int warmup_rounds = 1;
  bool token_ms = false;  // keep every token's latency in the JSON
  int generate = 0;       // > 0: greedy generation of this many tokens per prompt
  // Called before sequence i is decoded (e.g. to point a score source at its window).
  std::function<void(size_t)> before_sequence;
  // Keep the routing (router and pre-gate scores, decisions) of each configuration's last
  // warm-up round (or first round) in BenchResult::record: what the simulator replays to predict
  // the figures (routing is the same in every round).
  bool record_routing = false;
  // Speculative decoding (with generate > 0): this drafter proposes `draft_k` tokens per
  // verification of each configuration's engine (the engine's --spec-select rule, if any).
  // Without generate, teacher forced over the sequences (SpeculativeDecoder::step_forced), also
  // with `synthetic` in place of a drafter model.
  engine::Engine* drafter = nullptr;
  std::optional<engine::SyntheticDraft> synthetic;
  int draft_k = 4;
  // Work run beside configuration i (e.g. reads competing with its compute): called before each
  // of its rounds, warm-up included; what it returns lives while the round runs. May be empty,
  // or return nullptr for configurations that run alone.
  std::function<std::shared_ptr<void>(size_t)> beside;
  // Called when the decode of sequence i starts (true: its reset and prompt done) and ends
  // (false): e.g. to count what work beside it did while it decoded only.
  std::function<void(size_t, bool)> decoding;
  // Called right before each timed round (round >= 0) of configuration i, its engine made: e.g.
  // to measure the link in the state that round will find it in.
  std::function<void(size_t, int)> before_round;
};

struct BenchRound {
  int round = 0;
  int64_t tokens = 0;
  double mean_ms = 0, p50_ms = 0, p99_ms = 0;  // measured wall clock per decode token
  double sim_mean_ms = 0;                      // the scheduler's clock (sim link), else 0
  std::vector<double> token_ms;
  // Per token.
  double demand = 0, prefetch = 0;  // copies enqueued (logical insertions without a link)
  double emitted = 0, in_time = 0, late = 0, unused = 0, dropped = 0;  // prefetches (links)
  double stall_ms = 0, stall_demand_ms = 0, stall_prefetch_ms = 0, stall_other_ms = 0;
  double host_ms = 0;
  double attention_ms = 0, moe_ms = 0;  // A(l) and M(l) summed over MoE layers (link clock)
  double link_clock_ms = 0;             // token latency on the link's clock
  double link_gb_per_s = 0;             // bytes copied per second of decode time
  // Bytes copied per second the link had a copy in flight: the rate the link reached under this
  // configuration's own copies (0 where the link does not measure its busy time).
  double link_busy_gb_per_s = 0;
  bool physical = false;  // copies above come from a link (not the logical counters)
  // Speculative decoding: committed tokens per verification, the blocks' copies per committed
  // token, drafting and verification time per committed token (ms_per_token is per committed
  // token too).
  // Copies and stalls above are per committed token as well; restore_copies: rollback's slots
  // copied again (logical without a link); acceptance[d]: accepted / checked drafts at depth d+1.
  double tau = 0, block_copies = 0, restore_copies = 0, draft_ms = 0, verify_ms = 0;
  double block_prefetched = 0;  // of block_copies: copied early from the pre-gate (links)
  std::vector<double> acceptance;
};

struct BenchResult {
  BenchConfig config;
  std::vector<BenchRound> rounds;
  engine::RoutingRecord record;  // with BenchOptions::record_routing: the first timed round's
};

// `make_engine(i)` builds a fresh engine for configuration `configs[i]` (never called for an
// unavailable one). `sequences`: the windows
// (teacher forced) or, with options.generate > 0, the prompts. `progress(done, total)` after
// every (round, configuration).
std::vector<BenchResult> run_bench(
    std::span<const BenchConfig> configs,
    const std::function<std::unique_ptr<engine::Engine>(size_t)>& make_engine,
    std::span<const std::vector<int32_t>> sequences, const BenchOptions& options,
    const std::function<void(int64_t, int64_t)>& progress = {});

// The `bench --json` document (schema steermoe.bench/1).
nlohmann::json bench_json(std::span<const BenchResult> results, const nlohmann::json& header);
// Markdown table: one row per configuration, means over rounds; speed-up against `baseline`
// (a configuration name, or the first) measured side by side.
std::string bench_table(std::span<const BenchResult> results);

}  // namespace steermoe::eval
