// The policy and the scheduler on the simulated clock over random traces: the invariants of
// the timing model, the determinism of logical policies under any schedule (the paper's
// Table 1 in simulation), and no allocation on the hot path.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "../alloc_counter.hpp"
#include "common/error.hpp"
#include "link/simulated_link.hpp"
#include "policy/router.hpp"
#include "schedule/offload_config.hpp"
#include "schedule/offload_step.hpp"
#include "schedule/simulator.hpp"
#include "synthetic.hpp"

namespace steermoe::schedule {
namespace {

using testing::SyntheticTrace;

// A fast tiny profile: 1 ms copies against ~1 ms of compute per layer, so copies matter.
HardwareProfile tiny_profile(double bandwidth_scale = 1.0) {
  HardwareProfile p;
  p.name = "tiny";
  p.link_bandwidth_bytes_per_s = 1e6 * bandwidth_scale;
  p.link_latency_s = 20e-6;
  p.expert_bytes = 1000;
  p.attention_s = 300e-6;
  p.moe_fixed_s = 50e-6;
  p.moe_per_expert_s = 100e-6;
  p.dense_s = 10e-6;
  p.head_s = 200e-6;
  p.host_policy_s = 20e-6;
  return p;
}

struct Case {
  const char* policy;
  int max_inflight;
};

// The rows of step `t` of a trace as the step's driver; `on_routed` sees every decision.
struct RowDriver final : LayerDriver {
  const TraceView& v;
  int64_t t = 0;
  std::function<void(int, const policy::Decision&)> on_routed;
  explicit RowDriver(const TraceView& view) : v(view) {}
  LayerScores scores(int l) override {
    return {.z = v.score_row(t, l),
            .pregate_next = l + 1 < v.layers ? v.pregate_row(t, l + 1) : std::span<const float>{}};
  }
  void routed(int l, int /*position*/, const policy::Decision& d,
              std::span<const float> /*pregate*/) override {
    if (on_routed) on_routed(l, d);
  }
};

// The FNV-1a hash the simulator computes over (step, layer, S), from a logical-only step with
// no link and no scheduler at all (what `replay` does).
uint64_t replay_hash(const SyntheticTrace& trace, const policy::PolicyConfig& config,
                     const policy::Calibration& calib, int slots, int64_t* demand,
                     int64_t* prefetch) {
  OffloadStep step(trace.spec, config, calib, {.cache_slots = slots});
  const TraceView v = trace.view();
  uint64_t h = 1469598103934665603ull;
  auto in = [&](int64_t x) {
    for (int i = 0; i < 8; ++i) {
      h ^= static_cast<uint64_t>(x >> (8 * i)) & 0xffu;
      h *= 1099511628211ull;
    }
  };
  RowDriver driver(v);
  driver.on_routed = [&](int l, const policy::Decision& d) {
    *demand += static_cast<int64_t>(d.demand.size());
    // Part 1 insertions for layer l (made in H(l-1)): every layer's once per token.
    *prefetch += static_cast<int64_t>(d.prefetch.size());
    in(driver.t);
    in(l);
    for (int32_t e : d.selected) in(e);
  };
  size_t next = 0;
  for (int64_t t = 0; t < v.steps(); ++t) {
    if (next < trace.starts.size() && trace.starts[next] == t) {
      step.begin_request();
      ++next;
    }
    driver.t = t;
    step.run_token(v.tokens[static_cast<size_t>(t)], driver);
  }
  return h;
}

void check_invariants(const SimResult& r, const SyntheticTrace& trace, const HardwareProfile& p,
                      int slots, int max_inflight, const std::string& label) {
  SCOPED_TRACE(label);
  const RunTotals& tot = r.totals;
  const int layers = trace.spec.layers, k = trace.spec.top_k;
  constexpr double kEps = 1e-12;

  // Copies per (layer, slot), in ticket order.
  std::vector<std::vector<const link::CopyEvent*>> by_slot(static_cast<size_t>(layers) * slots);
  for (const auto& c : r.copies)
    by_slot[static_cast<size_t>(c.copy.layer) * slots + c.copy.slot].push_back(&c);

  for (const LayerEvent& ev : r.events) {
    ASSERT_EQ(static_cast<int>(ev.slots.size()), k);
    EXPECT_LE(ev.host_end + kEps, ev.moe_start + 2 * kEps);
    for (const int32_t slot : ev.slots) {
      for (const link::CopyEvent* c : by_slot[static_cast<size_t>(ev.layer) * slots + slot]) {
        // No layer starts before the copies into its slots that were enqueued by then complete.
        if (c->enqueued <= ev.host_end + kEps) {
          ASSERT_LE(c->end, ev.moe_start + kEps) << "step " << ev.step << " layer " << ev.layer
                                                 << " slot " << slot << " ticket " << c->ticket;
        }
        // No slot is overwritten while a layer that uses it runs.
        ASSERT_FALSE(c->start < ev.moe_end - kEps && c->end > ev.moe_start + kEps)
            << "copy " << c->ticket << " into slot " << slot << " of layer " << ev.layer
            << " overlaps M of step " << ev.step;
      }
    }
  }

  // Every copy is accounted for; every logical insertion copied or dropped as stale.
  EXPECT_EQ(static_cast<int64_t>(r.copies.size()),
            tot.warm_copies + tot.demand + tot.prefetch_enqueued);
  EXPECT_EQ(tot.prefetch_emitted, tot.prefetch_enqueued + tot.prefetch_dropped +
                                      tot.prefetch_dropped_reset + r.pending_at_end);
  EXPECT_EQ(tot.prefetch_in_time + tot.prefetch_late + tot.prefetch_unused, tot.prefetch_emitted);
  EXPECT_EQ(tot.bytes, (tot.demand + tot.prefetch_enqueued) * p.expert_bytes);
  EXPECT_NEAR(tot.stall, tot.stall_on_demand + tot.stall_on_prefetch + tot.stall_on_other, 1e-9);

  // Per-layer figures add up to the totals.
  int64_t demand = 0, in_time = 0, late = 0, unused = 0;
  double stall = 0, host = 0;
  for (int l = 0; l < layers; ++l) {
    demand += tot.layer_demand[l];
    in_time += tot.layer_in_time[l];
    late += tot.layer_late[l];
    unused += tot.layer_unused[l];
    stall += tot.layer_stall[l];
    host += tot.layer_host[l];
  }
  EXPECT_EQ(demand, tot.demand);
  EXPECT_EQ(in_time, tot.prefetch_in_time);
  EXPECT_EQ(late, tot.prefetch_late);
  EXPECT_EQ(unused, tot.prefetch_unused);
  EXPECT_NEAR(stall, tot.stall, 1e-9);
  EXPECT_NEAR(host, tot.host, 1e-9);

  // Token latency = compute + host + stalls, nothing else (host and compute never overlap).
  const int64_t steps = static_cast<int64_t>(r.token_latency.size());
  double latency = 0;
  int64_t copies = 0;
  for (size_t i = 0; i < r.token_latency.size(); ++i) {
    latency += r.token_latency[i];
    copies += r.token_copies[i];
    EXPECT_GE(r.token_latency[i], r.resident_token_s - 1e-9);
  }
  EXPECT_EQ(copies, tot.demand + tot.prefetch_enqueued);
  const double compute =
      static_cast<double>(steps) *
      (p.dense_s + p.head_s + layers * (p.attention_s + p.moe_fixed_s + k * p.moe_per_expert_s));
  EXPECT_NEAR(latency, compute + tot.host + tot.stall, 1e-9 * latency);
  EXPECT_NEAR(tot.host, static_cast<double>(steps) * layers * p.host_policy_s, 1e-9);

  // A copy enqueued during decoding waits behind at most max_inflight prefetches plus the
  // other copies its own layer's S needs (K - 1). Single-request traces only (warm copies of a
  // later request are enqueued together by design).
  if (trace.starts.size() == 1) {
    for (size_t i = static_cast<size_t>(tot.warm_copies); i < r.copies.size(); ++i) {
      int ahead = 0;
      for (size_t j = 0; j < i; ++j) ahead += r.copies[j].end > r.copies[i].enqueued + kEps;
      ASSERT_LE(ahead, max_inflight + k - 1) << "ticket " << r.copies[i].ticket;
    }
  }
}

TEST(Simulator, InvariantsHoldOnRandomTracesForEveryPolicy) {
  const Case cases[] = {
      {"exact:evict=lru", 2},
      {"exact:evict=a,n=2,w=8", 1},
      {"exact:evict=a,n=2,w=8", 4},
      {"cacheprior:lambda=0.2", 2},
      {"psr:lambda=0.3,n=1", 1},
      {"psr:lambda=0.3,n=1", 2},
      {"psr:lambda=0.3,n=8", 2},
      {"spec:n=2,w=8", 2},
      {"physical:psr:lambda=0.3,n=2", 1},
  };
  const SyntheticTrace held_out = testing::make_trace(4, 16, 4, 300, 3, 99);
  const policy::Calibration calib = testing::calibrate(held_out);
  for (const int sequences : {1, 3}) {
    const SyntheticTrace trace = testing::make_trace(4, 16, 4, 240, sequences, 5);
    for (const int slots : {4, 8}) {
      for (const Case& c : cases) {
        const HardwareProfile p = tiny_profile();
        const policy::PolicyConfig config = policy::parse_policy(c.policy);
        const SimResult r = simulate(trace.spec, config, calib, p, trace.view(),
                                     {.cache_slots = slots,
                                      .max_inflight = c.max_inflight,
                                      .keep_decisions = false,
                                      .keep_events = true});
        const std::string label = std::string(c.policy) + " C=" + std::to_string(slots) +
                                  " inflight=" + std::to_string(c.max_inflight) +
                                  " sequences=" + std::to_string(sequences);
        check_invariants(r, trace, p, slots, c.max_inflight, label);
        if (!config.physical) {
          // The scheduler copied exactly the logical insertions a plain router run emits.
          int64_t demand = 0, prefetch = 0;
          const uint64_t hash = replay_hash(trace, config, calib, slots, &demand, &prefetch);
          EXPECT_EQ(r.decision_hash, hash) << label;
          EXPECT_EQ(r.totals.demand, demand) << label;
          EXPECT_EQ(r.totals.prefetch_emitted, prefetch) << label;
        }
      }
    }
  }
}

// A slow link (a copy takes longer than a layer's compute) over a calibrated synthetic trace:
// where prefetches wait, so that physical-only options change something.
struct SlowLinkCase {
  SyntheticTrace held_out = testing::make_trace(4, 16, 4, 300, 3, 99);
  policy::Calibration calib = testing::calibrate(held_out);
  SyntheticTrace trace = testing::make_trace(4, 16, 4, 240, 2, 5);
  HardwareProfile p = tiny_profile(0.25);
};

// What a physical-only option must keep: the decisions, the demand copies, the logical prefetches.
void expect_same_logical(const SimResult& got, const SimResult& want, const std::string& label) {
  EXPECT_EQ(got.decision_hash, want.decision_hash) << label;
  EXPECT_EQ(got.totals.demand, want.totals.demand) << label;
  EXPECT_EQ(got.totals.prefetch_emitted, want.totals.prefetch_emitted) << label;
}

// Prefetch pacing is physical only: every pacing makes the same decisions, demand copies and
// logical prefetches, and keeps the timing model's invariants; on a link slow enough that
// prefetches wait, deferring those found unused at their layer saves copies (demand pacing never
// copies them in the background).
TEST(Simulator, PrefetchPacingChangesCopiesNotDecisions) {
  const SlowLinkCase c;
  const auto& [held_out, calib, trace, p] = c;
  for (const char* text : {"psr:lambda=0.3,n=2", "psr:lambda=0.3,n=8", "exact:evict=a,n=2,w=8"}) {
    const policy::PolicyConfig config = policy::parse_policy(text);
    auto run = [&](PrefetchPacing pacing) {
      return simulate(trace.spec, config, calib, p, trace.view(),
                      {.cache_slots = 8, .max_inflight = 2, .pacing = pacing, .keep_events = true});
    };
    const SimResult fifo = run(PrefetchPacing::kFifo);
    EXPECT_EQ(fifo.totals.prefetch_deferred, 0) << text;
    int64_t enqueued[3] = {fifo.totals.prefetch_enqueued, 0, 0};
    for (const PrefetchPacing pacing : {PrefetchPacing::kDefer, PrefetchPacing::kDemand}) {
      const std::string label = std::string(text) + " pacing " + std::to_string(int(pacing));
      const SimResult r = run(pacing);
      check_invariants(r, trace, p, 8, 2, label);
      expect_same_logical(r, fifo, label);
      EXPECT_GT(r.totals.prefetch_deferred, 0) << label;
      enqueued[static_cast<int>(pacing)] = r.totals.prefetch_enqueued;
    }
    // defer copies deferred prefetches when the link is free; demand never does.
    EXPECT_LE(enqueued[1], enqueued[0]) << text;
    EXPECT_LT(enqueued[2], enqueued[1]) << text;
  }
}

// Issuing pending prefetches early (before each MoE as well as at layer boundaries) is physical
// only: the same decisions, demand copies and logical prefetches, the timing model's invariants,
// and fewer prefetches left to be forced out when their layer needs them. It is not always
// faster: a prefetch sent early can no longer be dropped when its slot is reassigned before the
// next boundary, so it may copy more (here up to 21% more prefetch copies).
TEST(Simulator, EarlyPrefetchIssueChangesLatencyNotDecisions) {
  const SlowLinkCase c;
  const auto& [held_out, calib, trace, p] = c;
  for (const char* text : {"psr:lambda=0.3,n=2", "psr:lambda=0.3,n=1", "exact:evict=a,n=2,w=8"}) {
    const policy::PolicyConfig config = policy::parse_policy(text);
    auto run = [&](PrefetchIssue issue) {
      return simulate(trace.spec, config, calib, p, trace.view(),
                      {.cache_slots = 8, .max_inflight = 1, .issue = issue, .keep_events = true});
    };
    const SimResult boundary = run(PrefetchIssue::kBoundary);
    const SimResult early = run(PrefetchIssue::kEarly);
    check_invariants(early, trace, p, 8, 1, text);
    expect_same_logical(early, boundary, text);
    EXPECT_GE(early.totals.prefetch_enqueued, boundary.totals.prefetch_enqueued) << text;
    EXPECT_LE(early.totals.prefetch_dropped, boundary.totals.prefetch_dropped) << text;
    EXPECT_LT(early.totals.prefetch_forced, boundary.totals.prefetch_forced) << text;
    EXPECT_NE(early.mean_s, boundary.mean_s) << text;
  }
}

// Compute sharing the machine with the link (a profile's compute_slowdown) makes tokens slower
// where prefetches overlap compute, never changes a decision, and costs nothing where no copy
// runs beside compute (demand copies only, or every expert resident).
TEST(Simulator, ComputeSlowdownWhileCopyingCostsTimeNotDecisions) {
  const SyntheticTrace held_out = testing::make_trace(4, 16, 4, 300, 3, 99);
  const policy::Calibration calib = testing::calibrate(held_out);
  const SyntheticTrace trace = testing::make_trace(4, 16, 4, 240, 2, 5);
  HardwareProfile shared = tiny_profile();
  shared.link_compute_slowdown = 0.3;
  for (const char* text : {"psr:lambda=0.3,n=2", "exact:evict=lru"}) {
    const policy::PolicyConfig config = policy::parse_policy(text);
    auto run = [&](const HardwareProfile& p, int slots) {
      return simulate(trace.spec, config, calib, p, trace.view(),
                      {.cache_slots = slots, .max_inflight = 2});
    };
    const SimResult alone = run(tiny_profile(), 8);
    const SimResult beside = run(shared, 8);
    EXPECT_EQ(beside.decision_hash, alone.decision_hash) << text;
    EXPECT_EQ(beside.totals.demand, alone.totals.demand) << text;
    EXPECT_EQ(beside.totals.prefetch_emitted, alone.totals.prefetch_emitted) << text;
    if (config.prefetch_budget > 0)
      EXPECT_GT(beside.mean_s, alone.mean_s * 1.01) << text;
    else  // demand copies are waited for before M(l): none runs beside compute
      EXPECT_DOUBLE_EQ(beside.mean_s, alone.mean_s) << text;
    // Every expert in a slot: the copies happen at request start, never beside compute.
    EXPECT_DOUBLE_EQ(run(shared, 16).mean_s, run(tiny_profile(), 16).mean_s) << text;
  }
}

// The paper's Table 1 in simulation: with routing on the physical cache (the experts whose
// copies were issued), changing only max_inflight or the link bandwidth changes the decisions;
// every logical policy's decisions stay bit-identical.
TEST(Simulator, Table1PhysicalRoutingDependsOnTheScheduleLogicalRoutingDoesNot) {
  const SyntheticTrace held_out = testing::make_trace(6, 32, 4, 300, 2, 11);
  const SyntheticTrace trace = testing::make_trace(6, 32, 4, 400, 2, 12);
  const policy::Calibration calib = testing::calibrate(held_out);
  const int slots = 16;  // 50% residency
  struct Schedule {
    int max_inflight;
    double bandwidth_scale;
  };
  const Schedule schedules[] = {{1, 1.0}, {2, 1.0}, {4, 1.0}, {2, 0.25}, {2, 4.0}, {2, 100.0}};
  auto decisions = [&](const std::string& policy, const Schedule& s) {
    return simulate(trace.spec, policy::parse_policy(policy), calib,
                    tiny_profile(s.bandwidth_scale), trace.view(),
                    {.cache_slots = slots, .max_inflight = s.max_inflight, .keep_decisions = true})
        .decisions;
  };
  for (const char* logical : {"exact:evict=lru", "exact:evict=a,n=8", "cacheprior:lambda=0.2",
                              "cacheprior:lambda=0.2,evict=a,n=8", "psr:lambda=0.3,n=1",
                              "psr:lambda=0.2,n=8", "spec:n=1"}) {
    const std::vector<int32_t> reference = decisions(logical, schedules[0]);
    ASSERT_EQ(reference.size(), size_t{400} * 6 * 4);
    for (const Schedule& s : schedules) {
      EXPECT_EQ(decisions(logical, s), reference)
          << logical << " changed with max_inflight " << s.max_inflight << ", bandwidth x"
          << s.bandwidth_scale;
    }
  }
  // Table 1's configuration: Cache-Prior lambda 0.2, A eviction, cross-layer prefetch of 8.
  const std::string physical = "physical:cacheprior:lambda=0.2,evict=a,n=8";
  const std::vector<int32_t> inflight1 = decisions(physical, {1, 1.0});
  const std::vector<int32_t> inflight2 = decisions(physical, {2, 1.0});
  const std::vector<int32_t> inflight4 = decisions(physical, {4, 1.0});
  EXPECT_NE(inflight1, inflight2) << "max_inflight 1 vs 2 gave the same physical decisions";
  EXPECT_NE(inflight2, inflight4) << "max_inflight 2 vs 4 gave the same physical decisions";
  EXPECT_NE(decisions(physical, {2, 0.25}), inflight2) << "bandwidth x0.25 changed nothing";
  EXPECT_NE(decisions(physical, {2, 4.0}), inflight2) << "bandwidth x4 changed nothing";
  // ... while the same schedule reproduces them exactly (the simulator itself is deterministic).
  EXPECT_EQ(decisions(physical, {2, 1.0}), inflight2);
}

// MoeWait::kReady: a layer's MoE starts on the experts whose copies have completed and takes the
// others as theirs complete. Physical only (the decisions and copies of kAll); the time saved is
// stall only (latency = compute + host + stall, as in kAll), and where every expert is in a slot
// nothing changes.
TEST(Simulator, ReadyMoeWaitStallsLessAndDecidesTheSame) {
  const SyntheticTrace held_out = testing::make_trace(4, 16, 4, 300, 3, 99);
  const policy::Calibration calib = testing::calibrate(held_out);
  const SyntheticTrace trace = testing::make_trace(4, 16, 4, 240, 2, 5);
  const HardwareProfile p = tiny_profile();
  const int layers = trace.spec.layers, k = trace.spec.top_k;
  for (const char* text : {"exact:evict=lru", "cacheprior:lambda=0.2", "psr:lambda=0.3,n=2"}) {
    const policy::PolicyConfig config = policy::parse_policy(text);
    auto run = [&](MoeWait wait, int slots) {
      return simulate(trace.spec, config, calib, p, trace.view(),
                      {.cache_slots = slots, .max_inflight = 2, .moe_wait = wait});
    };
    const SimResult all = run(MoeWait::kAll, 8);
    const SimResult ready = run(MoeWait::kReady, 8);
    expect_same_logical(ready, all, text);
    EXPECT_GT(all.totals.stall, 0) << text;
    EXPECT_LT(ready.totals.stall, all.totals.stall * 0.9) << text;
    EXPECT_LT(ready.mean_s, all.mean_s) << text;
    double latency = 0;
    for (const double s : ready.token_latency) latency += s;
    const double compute =
        static_cast<double>(ready.token_latency.size()) *
        (p.dense_s + p.head_s + layers * (p.attention_s + p.moe_fixed_s + k * p.moe_per_expert_s));
    EXPECT_NEAR(latency, compute + ready.totals.host + ready.totals.stall, 1e-9 * latency) << text;
    EXPECT_DOUBLE_EQ(run(MoeWait::kReady, 16).mean_s, run(MoeWait::kAll, 16).mean_s) << text;
  }
}

// The parts the step hands the driver under kReady: each layer's partition S in order of
// completion, first / last marked, and no part takes an expert before its copy has completed
// on the link's clock; some layers do start before all their copies are in.
TEST(OffloadStep, ReadyPartsPartitionTheSelectionAndTakeOnlyCompletedCopies) {
  const SyntheticTrace held_out = testing::make_trace(4, 16, 4, 300, 3, 99);
  const policy::Calibration calib = testing::calibrate(held_out);
  const SyntheticTrace trace = testing::make_trace(4, 16, 4, 200, 1, 5);
  const HardwareProfile p = tiny_profile();
  const TraceView v = trace.view();
  const auto k = static_cast<size_t>(trace.spec.top_k);
  for (const char* text : {"exact:evict=lru", "psr:lambda=0.3,n=2"}) {
    SCOPED_TRACE(text);
    link::SimulatedLink link(p.link_params());
    OffloadStep step(trace.spec, policy::parse_policy(text), calib,
                     {.cache_slots = 8,
                      .max_inflight = 2,
                      .expert_bytes = p.expert_bytes,
                      .moe_wait = MoeWait::kReady},
                     &link);
    step.simulate_compute(&link, &p);
    struct PartsDriver final : LayerDriver {
      const TraceView& v;
      OffloadStep& step;
      link::SimulatedLink& link;
      size_t k;
      int64_t t = 0, parts = 0, split_layers = 0, whole_moe_calls = 0;
      std::vector<uint8_t> seen;
      PartsDriver(const TraceView& view, OffloadStep& s, link::SimulatedLink& l, size_t top_k)
          : v(view), step(s), link(l), k(top_k), seen(top_k) {}
      LayerScores scores(int l) override {
        return {
            .z = v.score_row(t, l),
            .pregate_next = l + 1 < v.layers ? v.pregate_row(t, l + 1) : std::span<const float>{}};
      }
      void routed(int, int, const policy::Decision&, std::span<const float>) override {}
      void moe(int) override { ++whole_moe_calls; }
      void moe_part(int l, std::span<const int32_t> picks, bool first, bool last) override {
        if (first) std::fill(seen.begin(), seen.end(), 0);
        ASSERT_FALSE(picks.empty());
        const std::span<const int32_t> slots = step.router().decision(l).selected_slot;
        for (size_t j = 0; j < picks.size(); ++j) {
          const auto i = static_cast<size_t>(picks[j]);
          ASSERT_LT(i, k);
          if (j > 0) {
            ASSERT_LT(picks[j - 1], picks[j]);  // ascending
          }
          ASSERT_FALSE(seen[i]) << "position " << i << " in two parts";
          seen[i] = 1;
          ASSERT_LE(step.scheduler()->slot_ticket(l, slots[i]), link.completed())
              << "layer " << l << " position " << i << " before its copy completed";
        }
        ++parts;
        if (!last) return;
        split_layers += !first;
        for (size_t i = 0; i < k; ++i) ASSERT_TRUE(seen[i]) << "position " << i << " never";
      }
    } driver(v, step, link, k);
    step.begin_request();
    // Each layer's M(l) on the link clock less the stalls between its parts is its compute
    // (what `bench` and `profile` report as the MoE's time), however the layer was split.
    const double layer_moe = p.moe_fixed_s + static_cast<double>(k) * p.moe_per_expert_s;
    int64_t layers_with_waits = 0;
    for (int64_t t = 0; t < v.steps(); ++t) {
      driver.t = t;
      step.run_token(v.tokens[static_cast<size_t>(t)], driver);
      if (HasFatalFailure()) return;
      for (int l = 0; l < v.layers; ++l) {
        const LayerTiming& timing = step.timing(l);
        EXPECT_NEAR(timing.moe_end - timing.moe_start - timing.moe_waits, layer_moe, 1e-12)
            << "token " << t << " layer " << l;
        layers_with_waits += timing.moe_waits > 0;
      }
    }
    EXPECT_GT(layers_with_waits, 0);
    const int64_t layer_steps = v.steps() * v.layers;
    EXPECT_EQ(driver.whole_moe_calls, 0);
    EXPECT_GT(driver.split_layers, layer_steps / 20);
    EXPECT_GT(driver.parts, layer_steps + driver.split_layers - 1);
  }
}

// --moe-wait resolves once, goes back into a request unchanged, and a bad value names the option.
TEST(OffloadConfig, MoeWaitResolvesAndABadValueNamesTheOption) {
  const ModelFacts facts{.spec = testing::make_trace(4, 16, 4, 10, 1, 1).spec, .name = "m"};
  OffloadRequest r;
  EXPECT_EQ(resolve_offload(r, facts).moe_wait, MoeWait::kAll);
  r.moe_wait = "ready";
  const OffloadConfig c = resolve_offload(r, facts);
  EXPECT_EQ(c.moe_wait, MoeWait::kReady);
  EXPECT_EQ(c.request().moe_wait, "ready");
  r.moe_wait = "later";
  try {
    resolve_offload(r, facts);
    ADD_FAILURE() << "no error for --moe-wait later";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--moe-wait"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("later"), std::string::npos) << e.what();
  }
}

TEST(Simulator, HotPathAllocatesNothingAfterWarmUp) {
  const SyntheticTrace held_out = testing::make_trace(4, 16, 4, 200, 1, 3);
  const SyntheticTrace trace = testing::make_trace(4, 16, 4, 300, 1, 4);
  const policy::Calibration calib = testing::calibrate(held_out);
  const TraceView v = trace.view();
  for (const char* text : {"psr:lambda=0.3,n=2", "exact:evict=lru", "physical:psr:lambda=0.3,n=2",
                           "ready:psr:lambda=0.3,n=2"}) {
    // "ready:" (not a policy prefix): the same policy with MoeWait::kReady.
    const bool ready = std::string_view(text).starts_with("ready:");
    const policy::PolicyConfig config = policy::parse_policy(ready ? text + 6 : text);
    const int slots = 8;
    link::SimulatedLink link({.bandwidth_bytes_per_s = 1e6, .latency_s = 0});
    HardwareProfile profile;
    profile.attention_s = 300e-6;
    profile.host_policy_s = 20e-6;
    profile.moe_fixed_s = 500e-6;
    OffloadStep step(trace.spec, config, calib,
                     {.cache_slots = slots,
                      .max_inflight = 2,
                      .expert_bytes = 1000,
                      .moe_wait = ready ? MoeWait::kReady : MoeWait::kAll},
                     &link);
    step.simulate_compute(&link, &profile);
    step.begin_request();
    RowDriver driver(v);
    for (int64_t t = 0; t < v.steps(); ++t) {
      if (t == 50) steermoe::test_support::start_counting_allocations();  // warm-up over
      driver.t = t;
      step.run_token(v.tokens[static_cast<size_t>(t)], driver);
    }
    const TransferScheduler& scheduler = *step.scheduler();
    EXPECT_EQ(steermoe::test_support::stop_counting_allocations(), 0) << text;
    EXPECT_GT(scheduler.totals().demand + scheduler.totals().prefetch_enqueued, 100) << text;
  }
}

}  // namespace
}  // namespace steermoe::schedule
