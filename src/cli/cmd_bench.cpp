// `steermoe bench`: the latency protocol over text windows (eval/bench.hpp); markdown table on
// stdout, the raw per-round figures with --json.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "cli/checks.hpp"
#include "cli/commands.hpp"
#include "cli/engine_options.hpp"
#include "cli/speculative.hpp"
#include "cli/validators.hpp"
#include "common/error.hpp"
#include "common/input_file.hpp"
#include "common/json_input.hpp"
#include "common/machine.hpp"
#include "common/memory_limit.hpp"
#include "common/output_file.hpp"
#include "common/progress.hpp"
#include "engine/link_probe.hpp"
#include "engine/memory_plan.hpp"
#include "eval/bench.hpp"
#include "eval/scores_from.hpp"
#include "kernels/kernels.hpp"
#include "schedule/profile.hpp"
#include "schedule/simulator.hpp"
#include "tokenizer/tokenizer.hpp"
#include "trace/calibration_file.hpp"
#include "trace/trace.hpp"

namespace steermoe::cli {

namespace {

// Consecutive, non-overlapping windows of `len` tokens from the start of `ids` (at most
// `count`).
std::vector<std::vector<int32_t>> text_windows(const std::vector<int32_t>& ids, int count, int len,
                                               const std::string& file) {
  std::vector<std::vector<int32_t>> out;
  for (size_t begin = 0;
       begin + static_cast<size_t>(len) <= ids.size() && static_cast<int>(out.size()) < count;
       begin += static_cast<size_t>(len)) {
    out.emplace_back(ids.begin() + static_cast<ptrdiff_t>(begin),
                     ids.begin() + static_cast<ptrdiff_t>(begin + static_cast<size_t>(len)));
  }
  if (out.empty())
    fail(file, "text", "expected at least one window of {} tokens, the text has {}", len,
         ids.size());
  return out;
}

// Where the figures were taken: the machine, the kernels, the model's bytes, the disk link's
// bandwidth measured at start, the memory budget and the peaks.
nlohmann::json machine_json(const model::Model& model, const std::optional<MemoryBudget>& budget,
                            const std::optional<engine::DiskProbe>& probe) {
  const MachineFacts m = machine_facts();
  const engine::MemoryPlan plan = engine::plan_memory(model, schedule::OffloadConfig(), 0);
  nlohmann::json j{{"cpu", m.cpu},
                   {"cores", m.cores},
                   {"kernel", m.kernel},
                   {"mem_total_bytes", m.mem_total},
                   {"kernels", std::string(kernels::isa_name(kernels::active_isa()))},
                   {"model_bytes",
                    {{"weights", plan.weight_bytes},
                     {"experts", plan.expert_bytes},
                     {"non_expert", plan.non_expert_bytes}}},
                   {"peak_rss_bytes", peak_rss_bytes()}};
  if (probe)
    j["disk_link"] = {{"mode", probe->mode},
                      {"gb_per_s", probe->bytes_per_s / 1e9},
                      {"copy_latency_ms", probe->copy_latency_s * 1e3},
                      {"pair_ms", probe->pair_s * 1e3},
                      {"copies", probe->copies},
                      {"expert_bytes", probe->expert_bytes}};
  if (budget) {
    j["mem_limit_bytes"] = budget->limit_bytes();
    if (const auto peak = budget->peak_bytes()) j["cgroup_peak_bytes"] = *peak;
  }
  return j;
}

struct BenchCli {
  std::string model;
  std::string file;
  std::vector<std::string> policies{"exact:evict=lru"};
  int rounds = 3;
  int warmup = 1;
  bool no_probe = false;
  int windows = 4;
  int window_len = 64;
  int threads = 1;
  int generate = 0;
  std::string prompts;
  bool no_floor = false;
  bool token_ms = false;
  std::string json;
  std::string scores_from;
  std::string predict;       // --predict PROFILE: the simulator's prediction beside each row
  int probe_rounds_mib = 0;  // --probe-rounds MIB: a disk probe before every timed round
  std::string profile_out;   // steermoe profile -o: a hardware profile from the first row
  EngineOptions engine;
  SpecOptions spec;
};

// The link rate a configuration's rounds reached with a copy in flight (mean over rounds; 0 where
// the link does not measure its busy time or nothing was copied).
double row_link_rate(const eval::BenchResult& b) {
  double sum = 0;
  int n = 0;
  for (const eval::BenchRound& r : b.rounds) {
    if (r.link_busy_gb_per_s <= 0) continue;
    sum += r.link_busy_gb_per_s;
    ++n;
  }
  return n > 0 ? sum / n * 1e9 : 0.0;
}

// The simulator's ms/token for configuration `b` over the routing the bench recorded (the same
// tokens, router and pre-gate scores, windows as sequences) with `profile`'s durations; the
// floor row gets the profile's compute floor; 0 where there is nothing to replay.
// Where the simulated time goes, per decode token (ms): the stall before the MoEs and the host
// time; the rest is compute. Beside a round's measured breakdown it shows whether a miss is the
// link's (stall) or the compute's.
struct SimulatedSplit {
  double ms = 0, stall_ms = 0, host_ms = 0;
};

SimulatedSplit simulate_row(const eval::BenchResult& b, const schedule::OffloadConfig& o,
                            const policy::RouterSpec& spec,
                            const schedule::HardwareProfile& profile) {
  if (!b.config.unavailable.empty() || b.record.steps() == 0) return {};
  if (b.config.resident)
    return {.ms = profile.resident_token_seconds(spec.layers, spec.top_k) * 1e3};
  const engine::RoutingRecord& r = b.record;
  const schedule::TraceView view{.layers = r.moe_layers,
                                 .experts = r.experts,
                                 .tokens = r.tokens,
                                 .scores = r.scores,
                                 .pregate = r.pregate,
                                 .sequence_starts = r.sequence_starts};
  const schedule::SimResult sim = schedule::simulate(spec, o.policy, *o.calibration, profile, view,
                                                     {.cache_slots = o.cache_slots,
                                                      .max_inflight = o.max_inflight,
                                                      .pacing = o.pacing,
                                                      .issue = o.issue,
                                                      .moe_wait = o.moe_wait});
  const double tokens = static_cast<double>(std::max<int64_t>(sim.totals.tokens, 1));
  return {.ms = sim.mean_s * 1e3,
          .stall_ms = sim.totals.stall / tokens * 1e3,
          .host_ms = sim.totals.host / tokens * 1e3};
}

double simulate_row_ms(const eval::BenchResult& b, const schedule::OffloadConfig& o,
                       const policy::RouterSpec& spec, const schedule::HardwareProfile& profile) {
  return simulate_row(b, o, spec, profile).ms;
}

// With the profile's compute and, for its link, the rate the row reached (row_link_rate; one
// stream, no latency: the busy time it measured), so that a disk whose rate drifts between runs
// (a virtual disk's bursts) does not hide whether the timing model places copies, overlap and
// stalls right. 0 for rows without a measured rate (the floor row included).
double simulate_row_own_link_ms(const eval::BenchResult& b, const schedule::OffloadConfig& o,
                                const policy::RouterSpec& spec, schedule::HardwareProfile profile) {
  const double rate = row_link_rate(b);
  if (b.config.resident || rate <= 0) return 0.0;
  profile.link_bandwidth_bytes_per_s = rate;
  profile.link_latency_s = 0;
  profile.link_channels = 1;
  profile.link_pipelined = true;
  profile.link_transfer_slowdown = 0;  // the rate the row's copies reached beside its compute
  return simulate_row_ms(b, o, spec, profile);
}

// The link's reads one after another beside a row's compute, and the same reads alone right
// after: the link there reads at 1 - transfer_slowdown() of its speed alone (a core of the
// machine serves both: on 2 cores with 2 compute threads the link's I/O thread waits for one).
struct ReadsBesideCompute {
  engine::BackgroundReads::Done beside, alone;
  double beside_bytes_per_s() const {
    return beside.seconds > 0 ? static_cast<double>(beside.bytes) / beside.seconds : 0;
  }
  double alone_bytes_per_s() const {
    return alone.seconds > 0 ? static_cast<double>(alone.bytes) / alone.seconds : 0;
  }
  // Faster beside compute than alone is noise: no slowdown. Capped below 1 (the profile's range).
  double transfer_slowdown() const {
    if (!(beside_bytes_per_s() > 0 && alone_bytes_per_s() > 0)) return 0;
    return std::clamp(1.0 - beside_bytes_per_s() / alone_bytes_per_s(), 0.0, 0.9);
  }
};

// A hardware profile measured on this machine: the link from the probe, per-layer compute from
// the phase times on the link clock (A(l), H(l), M(l); the rest of a token's time is the head
// and the dense layers) of `b`: the run with every expert in a slot where it fits (no read
// during decode: the machine's compute), else the first configuration (compute slowed by its
// own reads, which the simulator then charges a second time as link time).
// `beside_reads`: the same run with the link reading beside it all along (or nullptr): compute
// there runs at 1 - slowdown of its speed alone; `reads`: the rates of those reads.
nlohmann::json measured_profile(const eval::BenchResult& b, const eval::BenchResult* beside_reads,
                                const ReadsBesideCompute& reads, const engine::DiskProbe& probe,
                                const model::ModelConfig& cfg, const std::string& model_path,
                                const std::string& name, bool compute_without_reads) {
  double attention = 0, moe = 0, host = 0, stall = 0, token = 0;
  for (const eval::BenchRound& r : b.rounds) {
    attention += r.attention_ms;
    moe += r.moe_ms;
    host += r.host_ms;
    stall += r.stall_ms;
    token += r.link_clock_ms;
  }
  const double n = static_cast<double>(std::max<size_t>(b.rounds.size(), 1));
  double slowdown = 0;
  if (beside_reads != nullptr && !beside_reads->rounds.empty() && attention + moe > 0) {
    double busy = 0;
    for (const eval::BenchRound& r : beside_reads->rounds) busy += r.attention_ms + r.moe_ms;
    busy /= static_cast<double>(beside_reads->rounds.size());
    // Faster beside reads than alone is noise: no slowdown. Capped below 1 (the profile's range).
    slowdown = std::clamp(1.0 - (attention + moe) / n / busy, 0.0, 0.9);
  }
  const double transfer_slowdown = reads.transfer_slowdown();
  if (reads.alone.seconds > 0)
    std::fprintf(stderr,
                 "profile: the link's reads one after another beside compute %.3f GB/s, alone "
                 "right after %.3f GB/s: transfer_slowdown %.3f; compute beside reads: "
                 "compute_slowdown %.3f\n",
                 reads.beside_bytes_per_s() / 1e9, reads.alone_bytes_per_s() / 1e9,
                 transfer_slowdown, slowdown);
  const double layers = cfg.moe_layer_count();
  const schedule::HardwareProfile linked = engine::with_probed_link({}, probe);
  return {{"name", name},
          {"description",
           fmt::format("measured by `steermoe profile` on {} ({}), {}; {}", machine_facts().cpu,
                       b.config.name, probe.mode,
                       compute_without_reads
                           ? "per-layer compute from the link clock's phase times with every "
                             "expert in a slot (no reads while decoding); compute_slowdown from "
                             "the same run with the link reading beside it"
                           : "per-layer compute from the link clock's phase times under the "
                             "configuration's own reads")},
          {"model",
           {{"name", model_path},  // as given (cfg.source is an HF folder's config.json)
            {"layers", cfg.moe_layer_count()},
            {"experts", cfg.experts},
            {"top_k", cfg.top_k}}},
          {"link",
           {{"bandwidth_GBps", linked.link_bandwidth_bytes_per_s / 1e9},
            {"latency_us", linked.link_latency_s * 1e6},
            // The disk link keeps several reads in flight: their latency overlaps, and where one
            // copy alone is slower than copies back to back, several transfer at once.
            {"pipelined", linked.link_pipelined},
            {"channels", linked.link_channels},
            {"compute_slowdown", slowdown},
            {"transfer_slowdown", transfer_slowdown},
            // Informational (sim reads neither): null where they were not measured.
            {"reads_beside_compute_GBps", reads.alone.seconds > 0
                                              ? nlohmann::json(reads.beside_bytes_per_s() / 1e9)
                                              : nlohmann::json(nullptr)},
            {"reads_alone_GBps", reads.alone.seconds > 0
                                     ? nlohmann::json(reads.alone_bytes_per_s() / 1e9)
                                     : nlohmann::json(nullptr)}}},
          {"expert_bytes", probe.expert_bytes},
          {"compute_us",
           {{"attention", attention / n / layers * 1e3},
            {"moe_fixed", 0.0},
            {"moe_per_expert", moe / n / layers / cfg.top_k * 1e3},
            {"dense_per_token", 0.0},
            {"head", std::max(0.0, (token - attention - moe - host - stall) / n) * 1e3}}},
          {"host_policy_us", host / n / layers * 1e3}};
}

void run_bench_cli(const BenchCli& o) {
  // Conflicts first: each of these asks for another kind of run.
  if (o.generate > 0 && !o.scores_from.empty())
    fail("bench", "--scores-from",
         "expected teacher forcing over the trace's tokens, not --generate (the two do not go "
         "together: drop one)");
  if (o.generate > 0 && o.prompts.empty())
    fail("bench", "--prompts", "expected a prompts file with --generate");
  if (o.generate == 0 && o.file.empty() && o.scores_from.empty())
    fail("bench", "-f",
         "expected a text file (or --scores-from TRACE, or --generate N --prompts FILE)");
  if (o.probe_rounds_mib > 0 && o.engine.link != "disk")
    fail("bench", "--probe-rounds", "expected --link disk (the link probed), found '{}'",
         o.engine.link);
  const std::optional<MemoryBudget> budget = enter_memory_budget(o.engine, o.model);
  auto model = model::Model::load(o.model);
  require_moe_layers(o.model, model->config(), "bench");
  const model::ModelConfig& cfg = model->config();
  const tokenizer::Tokenizer tok = load_tokenizer_for(o.model, *model);
  std::vector<std::vector<int32_t>> sequences;
  int context = o.window_len;
  std::optional<trace::Trace> score_trace;
  std::unique_ptr<eval::TraceScores> supplied;
  if (!o.scores_from.empty()) {
    score_trace.emplace(trace::Trace::open(o.scores_from));
    if (score_trace->experts() != cfg.experts || score_trace->meta().top_k != cfg.top_k)
      fail(o.scores_from, "experts/top_k",
           "expected the model's {} experts, top-{}, found {}, top-{}", cfg.experts, cfg.top_k,
           score_trace->experts(), score_trace->meta().top_k);
    // The scores mean what the model's router means: a softmax row is not a sigmoid one.
    const std::string router = cfg.router == model::RouterScore::kSigmoid ? "sigmoid" : "softmax";
    if (score_trace->meta().router != router)
      fail(o.scores_from + "/meta.json", "router", "expected the model's {} router, found {}",
           router, score_trace->meta().router);
    if (router == "sigmoid" && !score_trace->has_weights_scores())
      fail(o.scores_from, "weights_scores.npy",
           "expected the execution weights' scores a sigmoid-router trace records (`steermoe "
           "trace` writes them)");
    if (score_trace->meta().n_group != cfg.n_group ||
        score_trace->meta().topk_group != cfg.topk_group)
      std::fprintf(stderr,
                   "bench: note: %s was routed in %d groups keeping %d, the model routes in %d "
                   "keeping %d: the policies select by the model's rule from the trace's scores\n",
                   o.scores_from.c_str(), score_trace->meta().n_group,
                   score_trace->meta().topk_group, cfg.n_group, cfg.topk_group);
    if (score_trace->layers() != cfg.moe_layer_count())
      std::fprintf(stderr,
                   "bench: note: %s has %d MoE layers, the model %d: model layer m takes trace "
                   "layer m mod %d (no pre-gate at a wrap), so its copies are not those `sim` "
                   "gives on the trace\n",
                   o.scores_from.c_str(), score_trace->layers(), cfg.moe_layer_count(),
                   score_trace->layers());
    supplied = std::make_unique<eval::TraceScores>(*score_trace, cfg.moe_layer_count());
    sequences = supplied->windows(o.windows, o.window_len);
    for (auto& seq : sequences)
      for (int32_t& t : seq) t %= cfg.vocab;  // the trace model's ids, embedded by this model
  } else if (o.generate > 0) {
    std::istringstream lines(read_text_file(o.prompts));
    for (std::string line; std::getline(lines, line);) {
      if (line.empty()) continue;
      sequences.push_back(tok.encode(line, {.parse_special = true, .add_special = true}));
      if (sequences.back().empty()) sequences.pop_back();
      if (static_cast<int>(sequences.size()) >= o.windows) break;
    }
    if (sequences.empty()) fail(o.prompts, "prompts", "expected at least one non-empty line");
    context = 0;
    for (const auto& s : sequences) context = std::max(context, static_cast<int>(s.size()));
    context += o.generate;
  } else {
    const std::vector<int32_t> ids = tok.encode(read_text_file(o.file), {.parse_special = false});
    sequences = text_windows(ids, o.windows, o.window_len, o.file);
  }
  if (static_cast<int>(sequences.size()) < o.windows) {
    std::fprintf(stderr,
                 "bench: note: %zu windows of the %d asked (--windows): the %s holds no more%s\n",
                 sequences.size(), o.windows,
                 !o.scores_from.empty() ? "trace" : (o.generate > 0 ? "prompts file" : "text"),
                 o.generate > 0 ? "" : " at this --window-len");
  }
  schedule::OffloadRequest request = offload_request(o.engine, *model, o.model);
  apply_speculative(o.spec, request);
  Drafter drafter;
  if (!o.spec.draft.empty()) {
    // With --generate the drafter's own drafts are verified; over text windows or a trace,
    // teacher forced (drafts accepted while they equal the text; a synthetic drafter may stand
    // in for a model there).
    drafter = load_drafter(o.spec, o.threads, context, tok, /*teacher_forced=*/o.generate == 0);
    if (!o.predict.empty())
      fail("bench", "--predict",
           "expected no --draft: the simulator replays plain decoding's routing (one position "
           "per token), not verification blocks");
  }
  if (!o.predict.empty() && o.generate > 0)
    fail("bench", "--predict",
         "expected teacher forcing (text windows, or --scores-from TRACE), not --generate: the "
         "simulator replays the routing of the same windows");
  if (supplied) {
    // The trace model's calibration (--calib only), its layers mapped like the trace's.
    request.calibration.reset();
    request.calibration_source = o.engine.calib;
    // The model's own calibration does not apply: the routing scores are the trace model's.
    request.calibration_hint = fmt::format(
        "with --scores-from it needs the calibration of the model the trace --scores-from {} was "
        "recorded with ({}'s own does not apply)",
        o.scores_from, o.model);
    if (!o.engine.calib.empty())
      request.calibration =
          std::make_shared<const policy::Calibration>(eval::map_calibration_layers(
              trace::read_calibration(o.engine.calib), cfg.moe_layer_count()));
  }
  const std::string& calib_path = request.calibration_source;
  // Every configuration resolved (and so checked) before the first one runs.
  std::vector<eval::BenchConfig> configs;
  std::vector<schedule::OffloadConfig> offloads;
  for (const std::string& p : o.policies) {
    offloads.push_back(resolve_policy(request, p, *model));
    check_fits(budget, *model, offloads.back(), context);
    const int cache = offloads.back().cache_slots;
    const std::string drafting =
        o.spec.draft.empty()
            ? std::string()
            : fmt::format(" + draft{} k={} {}", drafter.synthetic ? " " + o.spec.draft : "",
                          o.spec.draft_k, o.spec.select);
    configs.push_back({.name = fmt::format("{}@{} {}{}", p, cache, o.engine.link, drafting),
                       .policy = p,
                       .cache = cache,
                       .residency = static_cast<double>(cache) / cfg.experts,
                       .link = o.engine.link});
  }
  // Why a configuration that holds every expert in memory cannot run here (the budget, or 90%
  // of this machine's memory), or "" when it fits.
  const auto does_not_fit = [&](const schedule::OffloadConfig& every_expert) -> std::string {
    const engine::MemoryPlan plan =
        engine::plan_memory(*model, every_expert, engine::resolve_context(cfg, context));
    const uint64_t room = budget ? budget->limit_bytes() : machine_facts().mem_total / 10 * 9;
    if (plan.total() <= room) return {};
    return fmt::format("does not fit: {} > {} ({})", bytes_text(plan.total()), bytes_text(room),
                       budget ? "--mem-limit" : "90% of this machine's memory");
  };
  if (!o.no_floor) {
    configs.push_back({.name = "all experts resident",
                       .policy = "exact:evict=lru",
                       .cache = cfg.experts,
                       .residency = 1.0,
                       .link = "resident",
                       .resident = true});
    schedule::OffloadRequest floor = request;
    floor.cache = cfg.experts;
    floor.residency = 0;
    floor.link = "resident";
    offloads.push_back(resolve_policy(floor, "exact:evict=lru", *model));
    // The floor computes with every weight in memory; where they do not all fit (the budget,
    // or this machine's memory) it would measure page faults instead: say so, do not time it.
    configs.back().unavailable = does_not_fit(offloads.back());
  }
  // steermoe profile: a token's compute measured on the same link with every expert already in
  // its slot (copied at the start of each window, none while decoding), so the profile holds the
  // machine's compute, not compute slowed by the reads the simulator models as link time.
  std::optional<size_t> compute_row, reads_row;
  if (!o.profile_out.empty()) {
    schedule::OffloadRequest all = request;
    all.cache = cfg.experts;
    all.residency = 0;
    offloads.push_back(resolve_policy(all, "exact:evict=lru", *model));
    const std::string why = does_not_fit(offloads.back());
    if (why.empty()) {
      configs.push_back(
          {.name = fmt::format("compute: every expert in a slot@{} {}", cfg.experts, o.engine.link),
           .policy = "exact:evict=lru",
           .cache = cfg.experts,
           .residency = 1.0,
           .link = o.engine.link});
      compute_row = configs.size() - 1;
      // The same again with the link reading beside it all along: how much slower compute runs
      // while a copy transfers on this machine (the profile's link.compute_slowdown).
      offloads.push_back(offloads.back());
      configs.push_back(configs.back());
      configs.back().name = fmt::format("compute beside reads: every expert in a slot@{} {}",
                                        cfg.experts, o.engine.link);
      reads_row = configs.size() - 1;
    } else {
      offloads.pop_back();
      std::fprintf(stderr,
                   "profile: every expert in a slot %s: the compute comes from the first "
                   "configuration, measured under its own reads; compute beside reads and the "
                   "link beside compute are not measured: the profile models no contention "
                   "(compute_slowdown and transfer_slowdown 0)\n",
                   why.c_str());
    }
  }
  std::optional<engine::DiskProbe> probe;
  if (o.engine.link == "disk" && !o.no_probe) {
    probe = engine::probe_disk_link(*model);
    std::fprintf(stderr,
                 "bench: disk link %s: %.2f GB/s over %d copies back to back, one expert copy "
                 "(%s) %.2f ms alone, two together %.2f ms\n",
                 probe->mode.c_str(), probe->bytes_per_s / 1e9, probe->copies,
                 bytes_text(static_cast<uint64_t>(probe->expert_bytes)).c_str(),
                 probe->copy_latency_s * 1e3, probe->pair_s * 1e3);
  }
  // --probe-rounds: the disk probed right before every timed round of every configuration on it
  // (each probe's walk starts where the last one ended, so no probe rereads the last one's bytes),
  // after as many bytes again read untimed: a probe right after a row that read nothing (the
  // floor row) read 0.61-0.65 GB/s, the row after it 1.6-1.7 GB/s with its own copies (the disk
  // of a Firecracker guest, cold after idling).
  std::vector<std::vector<std::optional<engine::DiskProbe>>> round_probes(
      configs.size(), std::vector<std::optional<engine::DiskProbe>>(static_cast<size_t>(o.rounds)));
  int next_probe_start = 0;
  const auto probe_round = [&](size_t c, int round) {
    if (o.probe_rounds_mib == 0 || configs[c].resident) return;
    const int64_t bytes = int64_t{o.probe_rounds_mib} << 20;
    engine::DiskProbe p = engine::probe_disk_link(*model, 8, bytes, next_probe_start, bytes);
    next_probe_start += p.walked;
    round_probes[c][static_cast<size_t>(round)] = std::move(p);
  };
  // The reads beside the "compute beside reads" row while it decodes (its windows' warm-up
  // copies read from the same disk), and after each of its rounds (the disk in the state that
  // round left it) the same reads alone for a second: how much slower the link reads while
  // compute runs (the profile's link.transfer_slowdown). Each read walks experts the last did
  // not read.
  ReadsBesideCompute reads_tally;
  int next_read = 0;
  engine::BackgroundReads* reading = nullptr;
  engine::BackgroundReads::Done decode_from;
  const auto reads_beside_round = [&]() -> std::shared_ptr<void> {
    reading = new engine::BackgroundReads(*model, next_read);
    return {reading, [&](engine::BackgroundReads* r) {
              reading = nullptr;
              next_read += r->stop().copies;
              delete r;
              const engine::BackgroundReads::Done alone =
                  engine::reads_alone(*model, 1.0, next_read);
              next_read += alone.copies;
              reads_tally.alone.bytes += alone.bytes;
              reads_tally.alone.seconds += alone.seconds;
            }};
  };
  const auto count_reads_while_decoding = [&](size_t, bool start) {
    if (reading == nullptr) return;
    const engine::BackgroundReads::Done now = reading->sample();
    if (start) {
      decode_from = now;
      return;
    }
    reads_tally.beside.bytes += now.bytes - decode_from.bytes;
    reads_tally.beside.seconds += now.seconds - decode_from.seconds;
  };
  const auto make = [&](size_t index) {
    engine::EngineParams p = engine_params(o.engine, offloads.at(index), o.threads, context);
    p.score_source = supplied.get();
    return std::make_unique<engine::Engine>(*model, p);
  };
  // Rate and ETA on stderr (quiet with -q / STEERMOE_QUIET=1); Ctrl-C checked there too.
  Progress bench_progress("bench", 0, "rounds x configurations");
  const auto progress = [&bench_progress](int64_t done, int64_t total) {
    bench_progress.set_total(total);
    bench_progress.advance(done - bench_progress.done());
  };
  const std::vector<eval::BenchResult> results =
      eval::run_bench(configs, make, sequences,
                      {.rounds = o.rounds,
                       .warmup_rounds = o.warmup,
                       .token_ms = o.token_ms,
                       .generate = o.generate,
                       .before_sequence =
                           [&](size_t i) {
                             if (supplied) supplied->begin_window(i);
                           },
                       .record_routing = !o.predict.empty(),
                       .drafter = drafter.engine.get(),
                       .synthetic = drafter.synthetic,
                       .draft_k = o.spec.draft_k,
                       .beside = [&](size_t c) -> std::shared_ptr<void> {
                         if (c != reads_row) return nullptr;
                         return reads_beside_round();
                       },
                       .decoding = count_reads_while_decoding,
                       .before_round = probe_round},
                      progress);
  // Per configuration: from the profile, with the link rate the row reached, and (with
  // --probe-rounds) the mean over rounds of each round simulated with the link probed before it
  // and, where the floor row ran, the profile's compute scaled to that row's mean time over the
  // run (compute_scale: the machine's compute drifts between runs as well, 14-21% slower in a
  // bench than in the profile taken a minute before it on a Firecracker guest; the floor row's
  // single rounds moved 38-52 ms/token within one run, while the other rows of the same round did
  // not follow, so the run's mean, not the round's).
  std::vector<double> predicted(results.size()), predicted_own_link(results.size()),
      predicted_probed(results.size()), predicted_probed_unslowed(results.size());
  // The probed prediction with the link 10% slower and 10% faster than probed: how much a small
  // error in the link's rate moves it. A row whose copies keep the link near saturation (PSR as
  // published) queues, and its stall then moves several times more than the rate.
  std::vector<double> predicted_probed_slower(results.size()),
      predicted_probed_faster(results.size());
  constexpr double kLinkSensitivity = 0.10;
  std::vector<std::vector<SimulatedSplit>> predicted_round(results.size());
  double compute_scale = 0;
  if (!o.predict.empty()) {
    const schedule::HardwareProfile profile = schedule::load_profile(o.predict, {}, "--predict");
    // The prediction runs the profile's link, not --link's: say so (a disk profile beside an
    // emulated link is a different machine, and the error column would read as the simulator's).
    std::fprintf(stderr,
                 "bench: --predict simulates the profile's link (%.3f GB/s, %.1f us a copy, %d "
                 "channel%s), not --link %s's; each row is also predicted at the rate its own "
                 "copies reached\n",
                 profile.link_bandwidth_bytes_per_s / 1e9, profile.link_latency_s * 1e6,
                 profile.link_channels, profile.link_channels == 1 ? "" : "s",
                 o.engine.link.c_str());
    const policy::RouterSpec spec = engine::router_spec(cfg);
    note_profile_shape(profile, spec, "bench");
    // The simulator copies the profile's expert size; a model of other experts reads otherwise
    // (a profile of a large model beside a small one predicted 419 ms against 0.49 measured).
    int first_moe = 0;
    while (!cfg.moe_layer[static_cast<size_t>(first_moe)]) ++first_moe;
    const auto& e0 = model->layer(first_moe).experts[0];
    const uint64_t model_expert_bytes =
        model::matrix_bytes(e0.gate) + model::matrix_bytes(e0.up) + model::matrix_bytes(e0.down);
    if (profile.expert_bytes > 0 &&
        static_cast<uint64_t>(profile.expert_bytes) != model_expert_bytes)
      std::fprintf(stderr,
                   "bench: note: the profile's experts are %s each, this model's %s: the "
                   "predictions copy the profile's\n",
                   bytes_text(static_cast<uint64_t>(profile.expert_bytes)).c_str(),
                   bytes_text(model_expert_bytes).c_str());
    if (o.engine.link == "resident")
      std::fprintf(stderr,
                   "bench: note: --link resident makes no copies: each row's prediction is of the "
                   "profile's link, not of this run (measure --link disk to compare)\n");
    const eval::BenchResult* floor_row = nullptr;
    for (const eval::BenchResult& b : results)
      if (b.config.resident && b.config.unavailable.empty()) floor_row = &b;
    const double floor_simulated =
        floor_row != nullptr
            ? simulate_row_ms(*floor_row, offloads[static_cast<size_t>(floor_row - results.data())],
                              spec, profile)
            : 0.0;
    if (floor_simulated > 0 && !floor_row->rounds.empty()) {
      double floor_ms = 0;
      for (const eval::BenchRound& r : floor_row->rounds) floor_ms += r.mean_ms;
      compute_scale = floor_ms / static_cast<double>(floor_row->rounds.size()) / floor_simulated;
    }
    const schedule::HardwareProfile scaled =
        compute_scale > 0 ? profile.with_compute_scaled(compute_scale) : profile;
    // The same without the link slowed by compute (where the profile has it): what the term
    // changes, in the same run.
    schedule::HardwareProfile unslowed = scaled;
    unslowed.link_transfer_slowdown = 0;
    for (size_t c = 0; c < results.size(); ++c) {
      const eval::BenchResult& b = results[c];
      predicted[c] = simulate_row_ms(b, offloads[c], spec, profile);
      predicted_own_link[c] = simulate_row_own_link_ms(b, offloads[c], spec, profile);
      double sum = 0, sum_unslowed = 0, sum_slower = 0, sum_faster = 0, measured_probed = 0;
      int n = 0;
      for (size_t r = 0; r < b.rounds.size(); ++r) {
        const std::optional<engine::DiskProbe>& p = round_probes[c][r];
        predicted_round[c].push_back(
            p ? simulate_row(b, offloads[c], spec, engine::with_probed_link(scaled, *p))
              : SimulatedSplit{});
        if (predicted_round[c].back().ms <= 0) continue;
        sum += predicted_round[c].back().ms;
        if (scaled.link_transfer_slowdown > 0)
          sum_unslowed +=
              simulate_row_ms(b, offloads[c], spec, engine::with_probed_link(unslowed, *p));
        if (!b.config.resident) {
          for (const double sign : {-1.0, 1.0}) {
            schedule::HardwareProfile moved = engine::with_probed_link(scaled, *p);
            moved.link_bandwidth_bytes_per_s *= 1.0 + sign * kLinkSensitivity;
            (sign < 0 ? sum_slower : sum_faster) += simulate_row_ms(b, offloads[c], spec, moved);
          }
        }
        measured_probed += b.rounds[r].mean_ms;
        ++n;
      }
      if (n > 0) predicted_probed[c] = sum / n;
      if (n > 0) predicted_probed_unslowed[c] = sum_unslowed / n;
      if (n > 0) predicted_probed_slower[c] = sum_slower / n;
      if (n > 0) predicted_probed_faster[c] = sum_faster / n;
      if (predicted[c] <= 0) continue;
      double measured = 0;
      for (const eval::BenchRound& r : b.rounds) measured += r.mean_ms;
      measured /= static_cast<double>(std::max<size_t>(b.rounds.size(), 1));
      std::string own;
      if (predicted_own_link[c] > 0)
        own = fmt::format("; with the link rate this row reached ({:.2f} GB/s) {:.3f} ({:+.1f}%)",
                          row_link_rate(b) / 1e9, predicted_own_link[c],
                          100.0 * (predicted_own_link[c] / measured - 1.0));
      if (predicted_probed[c] > 0)
        own += fmt::format(
            "; each round with the link probed before it and the floor row's compute {:.3f} "
            "({:+.1f}%)",
            predicted_probed[c], 100.0 * (predicted_probed[c] / (measured_probed / n) - 1.0));
      if (predicted_probed_unslowed[c] > 0)
        own += fmt::format(" (without the link slowed by compute {:.3f}, {:+.1f}%)",
                           predicted_probed_unslowed[c],
                           100.0 * (predicted_probed_unslowed[c] / (measured_probed / n) - 1.0));
      if (predicted_probed_slower[c] > 0)
        own += fmt::format(" (link 10% slower {:.3f}, {:+.1f}%; 10% faster {:.3f}, {:+.1f}%)",
                           predicted_probed_slower[c],
                           100.0 * (predicted_probed_slower[c] / (measured_probed / n) - 1.0),
                           predicted_probed_faster[c],
                           100.0 * (predicted_probed_faster[c] / (measured_probed / n) - 1.0));
      std::fprintf(stderr, "bench: %s: measured %.3f ms/token, simulated %.3f (%+.1f%%)%s\n",
                   b.config.name.c_str(), measured, predicted[c],
                   100.0 * (predicted[c] / measured - 1.0), own.c_str());
    }
  }
  if (!o.profile_out.empty()) {
    if (!probe) fail("profile", "--link", "expected --link disk (the link that is measured)");
    write_file_atomic(
        o.profile_out,
        dump_json(
            measured_profile(compute_row ? results.at(*compute_row) : results.front(),
                             reads_row ? &results.at(*reads_row) : nullptr, reads_tally, *probe,
                             cfg, o.model, std::filesystem::path(o.profile_out).stem().string(),
                             compute_row.has_value()),
            2) +
            "\n");
    std::fprintf(stderr, "profile: wrote %s\n", o.profile_out.c_str());
  }
  std::fprintf(table_stream(o.json), "%s", eval::bench_table(results).c_str());
  std::fprintf(stderr, "bench: %s\n", memory_report(budget).c_str());
  if (!o.json.empty()) {
    const nlohmann::json header{{"model", o.model},
                                {"file", o.generate > 0 ? o.prompts : o.file},
                                {"rounds", o.rounds},
                                {"windows", sequences.size()},
                                {"window_len", o.window_len},
                                {"generate", o.generate},
                                {"threads", o.threads},
                                {"max_inflight", o.engine.max_inflight},
                                {"prefetch_pacing", o.engine.pacing},
                                {"prefetch_issue", o.engine.issue},
                                {"moe_wait", o.engine.moe_wait},
                                {"calibration", calib_path},
                                {"scores_from", o.scores_from},
                                {"warmup_rounds", o.warmup},
                                {"machine", machine_json(*model, budget, probe)},
                                {"predicted_by", o.predict}};
    nlohmann::json doc = eval::bench_json(results, header);
    if (o.probe_rounds_mib > 0) doc["probe_rounds_mib"] = o.probe_rounds_mib;
    if (o.probe_rounds_mib > 0 && compute_scale > 0) doc["compute_scale"] = compute_scale;
    for (size_t c = 0; c < results.size(); ++c) {
      nlohmann::json& row = doc["configurations"][c];
      if (predicted[c] > 0) row["simulated_ms_per_token"] = predicted[c];
      if (predicted_own_link[c] > 0) {
        row["simulated_own_link_ms_per_token"] = predicted_own_link[c];
        row["link_busy_gb_per_s"] = row_link_rate(results[c]) / 1e9;
      }
      if (predicted_probed[c] > 0) row["simulated_probed_ms_per_token"] = predicted_probed[c];
      if (predicted_probed_unslowed[c] > 0)
        row["simulated_probed_without_transfer_slowdown_ms_per_token"] =
            predicted_probed_unslowed[c];
      if (predicted_probed_slower[c] > 0) {
        row["simulated_probed_link_10pct_slower_ms_per_token"] = predicted_probed_slower[c];
        row["simulated_probed_link_10pct_faster_ms_per_token"] = predicted_probed_faster[c];
      }
      for (size_t r = 0; r < results[c].rounds.size(); ++r) {
        const std::optional<engine::DiskProbe>& p = round_probes[c][r];
        if (!p) continue;
        nlohmann::json& round = row["rounds"][r];
        round["probe"] = {{"gb_per_s", p->bytes_per_s / 1e9},
                          {"copy_latency_ms", p->copy_latency_s * 1e3},
                          {"pair_ms", p->pair_s * 1e3},
                          {"copies", p->copies},
                          {"warm_copies", p->warm_copies}};
        if (r < predicted_round[c].size() && predicted_round[c][r].ms > 0) {
          const SimulatedSplit& split = predicted_round[c][r];
          round["simulated_probed_ms_per_token"] = split.ms;
          if (!results[c].config.resident) {
            round["simulated_probed_stall_ms_per_token"] = split.stall_ms;
            round["simulated_probed_compute_ms_per_token"] =
                split.ms - split.stall_ms - split.host_ms;
          }
        }
      }
    }
    write_json_report(o.json, dump_json(doc, 1) + "\n");
  }
}

}  // namespace

void add_bench_command(CLI::App& root) {
  auto o = std::make_shared<BenchCli>();
  CLI::App* cmd = root.add_subcommand(
      "bench",
      "Latency protocol: teacher-forced decode over text windows, configurations interleaved per "
      "round; markdown table and --json");
  cmd->add_option("-m,--model", o->model, "Model: a .gguf file or a HuggingFace folder")
      ->required();
  cmd->add_option("-f,--file", o->file, "Text file the windows are taken from");
  cmd->add_option("--policy", o->policies, "Routing policies, one configuration each")
      ->expected(1, -1)
      ->capture_default_str();
  cmd->add_option("--rounds", o->rounds, "Timing rounds (configurations interleaved in each)")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  cmd->add_option("--warmup", o->warmup,
                  "Untimed rounds per configuration before timing (weights read through the page "
                  "cache are then in memory: the floor row measures compute, not page faults)")
      ->check(CLI::Range(0, 100))
      ->capture_default_str();
  cmd->add_flag("--no-probe", o->no_probe,
                "Do not measure the disk link's read bandwidth at start (--link disk)");
  cmd->add_option("--windows", o->windows, "Text windows (sequences) per round")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  cmd->add_option("--window-len", o->window_len, "Tokens per window, each decoded one at a time")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  cmd->add_option("-t,--threads", o->threads, "Threads")->check(CLI::Range(1, 1024));
  cmd->add_option("--generate", o->generate,
                  "Greedy generation of N tokens per prompt instead of teacher forcing")
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--prompts", o->prompts, "With --generate: a file of prompts, one per line");
  cmd->add_flag("--no-floor", o->no_floor, "Leave out the all-experts-resident floor row");
  cmd->add_flag("--token-ms", o->token_ms, "Keep every token's latency in the JSON (for CDFs)");
  cmd->add_option("--json", o->json,
                  "Write the raw per-round figures (steermoe.bench/1) here ('-' = stdout, the "
                  "table then on stderr)")
      ->check(WritablePath);
  cmd->add_option("--scores-from", o->scores_from,
                  "Route by a trace's router and pre-gate scores (the same experts, top-k and "
                  "router as the model; layers mapped cyclically; tokens and windows from the "
                  "trace; --calib = the trace model's calibration)");
  cmd->add_option("--predict", o->predict,
                  "Hardware profile (name or .json, e.g. from `steermoe profile`): the simulator "
                  "replays each configuration's recorded routing with it and its ms/token is "
                  "reported beside the measured one (teacher forcing only); on a link that "
                  "measures its busy time (disk), a second prediction uses, in place of the "
                  "profile's link, the rate each row's copies reached");
  cmd->add_option("--probe-rounds", o->probe_rounds_mib,
                  "With --link disk: probe the disk right before every timed round of every "
                  "configuration (MIB MiB read untimed, at least MIB MiB timed back to back, then "
                  "7 copies alone and 5 pairs, from experts the last probe did not read); the "
                  "JSON records each round's probe, and with --predict each round is also "
                  "simulated with the link its probe measured and the profile's compute scaled "
                  "to the floor row's mean over the run (compute_scale), so that a disk and a "
                  "machine whose speed drift are predicted in the state the run found them, "
                  "split into stall and compute, and again with the link 10% slower and faster "
                  "(0: off)")
      ->check(CLI::Range(0, 1 << 16))
      ->capture_default_str();
  add_engine_options(cmd, o->engine, /*with_policy=*/false);
  add_speculative_options(cmd, o->spec);
  cmd->final_callback([o] { run_bench_cli(*o); });
}

void add_profile_command(CLI::App& root) {
  auto o = std::make_shared<BenchCli>();
  o->rounds = 2;
  o->no_floor = true;
  CLI::App* cmd = root.add_subcommand(
      "profile",
      "Measure this machine as a hardware profile for `sim`: the disk link's bandwidth and "
      "per-copy "
      "latency (the link itself), and per-layer compute from the phase times of a teacher-forced "
      "decode (attention + router, policy, MoE, head) on that link with every expert in a slot "
      "(no reads while decoding; where that does not fit in memory, under the given cache and "
      "its reads), how much slower that compute runs with the link reading beside it "
      "(link.compute_slowdown), and how much slower the link reads beside that compute than "
      "alone right after (link.transfer_slowdown)");
  cmd->add_option("-m,--model", o->model, "Model: a .gguf file or a HuggingFace folder")
      ->required();
  cmd->add_option("-o,--output", o->profile_out, "Profile to write (.json, data/profiles format)")
      ->check(WritablePath)
      ->required();
  cmd->add_option("-f,--file", o->file, "Text file the windows are taken from");
  cmd->add_option("--scores-from", o->scores_from,
                  "Route by a trace's router and pre-gate scores (as `bench --scores-from`)");
  cmd->add_option("--policy", o->policies, "Routing policy while measuring")
      ->expected(1)
      ->capture_default_str();
  cmd->add_option("--rounds", o->rounds, "Rounds measured (after one warm-up round)")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  cmd->add_option("--windows", o->windows, "Windows (sequences) per round")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  cmd->add_option("--window-len", o->window_len, "Tokens per window")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  cmd->add_option("-t,--threads", o->threads, "Threads")->check(CLI::Range(1, 1024));
  o->engine.link = "disk";
  add_engine_options(cmd, o->engine, /*with_policy=*/false);
  cmd->final_callback([o] {
    if (o->engine.link != "disk")
      fail("profile", "--link", "expected disk (the link measured), found '{}'", o->engine.link);
    run_bench_cli(*o);
  });
}

}  // namespace steermoe::cli
