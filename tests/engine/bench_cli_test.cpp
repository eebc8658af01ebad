// `steermoe bench` and `steermoe profile` as the built binary, and the memory plan behind
// --mem-limit: the simulator's prediction replays exactly the engine's routing, the floor row is
// refused where its weights cannot be in memory, a measured profile is one `sim` reads.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "../cli_runner.hpp"
#include "../json_test_util.hpp"
#include "../offload_params.hpp"
#include "common/error.hpp"
#include "common/memory_budget.hpp"
#include "common/memory_limit.hpp"
#include "engine/expert_cache.hpp"
#include "engine/link_probe.hpp"
#include "engine/memory_plan.hpp"
#include "model/expert_ranges.hpp"
#include "model/weights.hpp"
#include "schedule/profile.hpp"

namespace steermoe::engine {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::HasSubstr;

const fs::path kModel = fs::path(STEERMOE_SOURCE_DIR) / "models" / "steer-olmoe-small";
const fs::path kText = fs::path(STEERMOE_SOURCE_DIR) / "data" / "text-small" / "eval.txt";

fs::path temp(const std::string& name) {
  return fs::path(::testing::TempDir()) / name;
}

json read_json(const fs::path& p) {
  std::ifstream in(p);
  return steermoe::test_support::parse_json_stream(in);
}

// Under `--link sim:P` the engine's own clock is the profile's; `--predict P` replays the routing
// it recorded through the simulator with the same profile: one code path, so the two agree to
// rounding. A prediction that replayed other routing, windows or policies would not.
TEST(BenchCli, PredictionOnTheSimLinkIsTheEnginesSimulatedClock) {
  const fs::path out = temp("bench_sim.json");
  const auto r = test_support::run_cli(
      "bench -m " + kModel.string() + " -f " + kText.string() +
      " --policy exact:evict=lru psr:lambda=0.3,n=1 cacheprior:lambda=0.2 --cache 24 --link "
      "sim:rtx4090-olmoe --windows 2 --window-len 24 --rounds 1 --predict rtx4090-olmoe --json " +
      out.string());
  ASSERT_EQ(r.status, 0) << r.output;
  // Which link the prediction runs is said (here the same one; on a disk or emulated link not).
  EXPECT_THAT(r.output, HasSubstr("--predict simulates the profile's link (22.900 GB/s"));
  EXPECT_THAT(r.output, HasSubstr("not --link sim:rtx4090-olmoe's"));
  // The profile's experts (OLMoE-1B-7B's, 12 MiB) are not this small model's: said.
  EXPECT_THAT(r.output, HasSubstr("the profile's experts are 12.0 MiB each, this model's"));
  const json doc = read_json(out);
  EXPECT_EQ(doc.at("predicted_by"), "rtx4090-olmoe");
  int compared = 0;
  for (const json& c : doc.at("configurations")) {
    if (c.at("resident").get<bool>()) continue;
    const double simulated = c.at("simulated_ms_per_token").get<double>();
    for (const json& round : c.at("rounds")) {
      const double engine_clock = round.at("sim_ms_per_token").get<double>();
      EXPECT_NEAR(simulated, engine_clock, 1e-9 * engine_clock)
          << steermoe::dump_json(c.at("name"));
      ++compared;
    }
    // The rate the row's copies reached with one in flight is the profile's (one stream, no
    // latency), so the prediction from the row's own link rate is the same clock again.
    EXPECT_NEAR(c.at("link_busy_gb_per_s").get<double>(), 22.9, 1e-6)
        << steermoe::dump_json(c.at("name"));
    EXPECT_NEAR(c.at("simulated_own_link_ms_per_token").get<double>(), simulated, 1e-6 * simulated)
        << steermoe::dump_json(c.at("name"));
  }
  EXPECT_EQ(compared, 3);
}

TEST(BenchCli, JsonNamesTheMachineAndTheWarmUp) {
  const fs::path out = temp("bench_machine.json");
  const auto r = test_support::run_cli("bench -m " + kModel.string() + " -f " + kText.string() +
                                       " --policy exact:evict=lru --cache 32 --windows 1 "
                                       "--window-len 8 --rounds 1 --warmup 2 --json " +
                                       out.string());
  ASSERT_EQ(r.status, 0) << r.output;
  const json doc = read_json(out);
  EXPECT_EQ(doc.at("warmup_rounds"), 2);
  const json& m = doc.at("machine");
  EXPECT_GT(m.at("cores").get<int>(), 0);
  EXPECT_GT(m.at("mem_total_bytes").get<uint64_t>(), 0u);
  EXPECT_FALSE(m.at("kernels").get<std::string>().empty());
  const json& bytes = m.at("model_bytes");
  EXPECT_EQ(bytes.at("weights").get<uint64_t>(),
            bytes.at("experts").get<uint64_t>() + bytes.at("non_expert").get<uint64_t>());
  EXPECT_GT(bytes.at("experts").get<uint64_t>(), bytes.at("non_expert").get<uint64_t>());
  // Warm-up rounds are not reported as rounds.
  for (const json& c : doc.at("configurations")) EXPECT_EQ(c.at("rounds").size(), 1u);
  // One round has no interval; the table says so instead of printing a zero-width one.
  EXPECT_NE(r.output.find("[n/a: 1 round]"), std::string::npos) << r.output;
}

// What a round did not measure is null, never 0: without a link that moves experts (the
// resident link, the floor row) no stall, policy time, compute or link rate is timed. With one,
// the prefetch split adds up to the emitted prefetches.
TEST(BenchCli, UnmeasuredFiguresAreNullAndThePrefetchSplitAddsUp) {
  const fs::path out = temp("bench_null.json");
  const auto r = test_support::run_cli(
      "bench -m " + kModel.string() + " -f " + kText.string() +
      " --policy psr:lambda=0.3,n=2 --cache 16 --link emulated:20 --windows 1 --window-len 12 "
      "--rounds 1 --warmup 0 --json " +
      out.string());
  ASSERT_EQ(r.status, 0) << r.output;
  const json configs = read_json(out).at("configurations");
  ASSERT_EQ(configs.size(), 2u);  // the policy and the floor row
  for (const json& c : configs) {
    SCOPED_TRACE(c.at("name").get<std::string>());
    const json& round = c.at("rounds").at(0);
    if (c.at("resident").get<bool>()) {
      EXPECT_EQ(round.at("copies_source"), "logical");
      for (const char* key : {"prefetch_per_token", "stall_ms_per_token", "host_ms_per_token",
                              "compute_ms_per_token", "link_gb_per_s", "link_busy_gb_per_s"})
        EXPECT_TRUE(round.at(key).is_null()) << key;
    } else {
      EXPECT_EQ(round.at("copies_source"), "scheduler");
      const json& p = round.at("prefetch_per_token");
      EXPECT_GT(p.at("emitted").get<double>(), 0);
      EXPECT_NEAR(
          p.at("in_time").get<double>() + p.at("late").get<double>() + p.at("unused").get<double>(),
          p.at("emitted").get<double>(), 1e-9);
      const json& compute = round.at("compute_ms_per_token");
      EXPECT_GT(compute.at("moe").get<double>(), 0);
      // The parts of a token add up to its mean (the rest: head, dense layers, embedding).
      EXPECT_NEAR(round.at("stall_ms_per_token").at("total").get<double>() +
                      round.at("host_ms_per_token").get<double>() +
                      compute.at("attention").get<double>() + compute.at("moe").get<double>() +
                      compute.at("rest").get<double>(),
                  round.at("ms_per_token").at("mean").get<double>(), 1e-9);
      EXPECT_GT(compute.at("rest").get<double>(), 0);
    }
  }
  // The table says what it did not time: "-", not 0.
  EXPECT_THAT(r.output, HasSubstr("(logical: no link) | - | - |"));
}

// `bench --generate --draft`: every figure per committed token, by kind. Rollback on a link that
// moves experts reports the scheduler's copies and the restores it made; a block rule its block
// copies; both tokens per verification and the acceptance at each depth.
TEST(BenchCli, SpeculativeRowsReportCopiesPerCommittedTokenByKind) {
  const fs::path prompts = temp("bench_spec_prompts.txt");
  {
    std::ofstream p(prompts);
    p << "def read_config(path):\n    import os\n";
  }
  const std::string drafter = (kModel.parent_path() / "steer-drafter-small").string();
  const auto bench = [&](const std::string& extra, const std::string& name) {
    const fs::path out = temp(name);
    const auto r = test_support::run_cli(
        "bench -m " + kModel.string() + " --generate 32 --prompts " + prompts.string() +
        " --cache 24 --rounds 1 --warmup 0 --no-floor --draft " + drafter + " --draft-k 5 " +
        extra + " --json " + out.string());
    EXPECT_EQ(r.status, 0) << r.output;
    EXPECT_THAT(r.output, HasSubstr(" restore; tau "));
    return read_json(out).at("configurations").at(0).at("rounds").at(0);
  };
  const json rollback = bench(
      "--policy psr:lambda=0.3,n=1 --spec-select rollback --link emulated:50,5", "spec_rb.json");
  EXPECT_EQ(rollback.at("copies_source"), "scheduler");
  const json& copies = rollback.at("copies_per_token");
  EXPECT_GT(copies.at("prefetch").get<double>(), 0);
  EXPECT_GT(copies.at("restore").get<double>(), 0);
  EXPECT_NEAR(copies.at("total").get<double>(),
              copies.at("demand").get<double>() + copies.at("prefetch").get<double>() +
                  copies.at("block").get<double>() + copies.at("restore").get<double>(),
              1e-9);
  const json& spec = rollback.at("speculative");
  EXPECT_GT(spec.at("tau").get<double>(), 1.0);
  ASSERT_EQ(spec.at("acceptance_per_depth").size(), 5u);
  for (const json& a : spec.at("acceptance_per_depth")) {
    EXPECT_GE(a.get<double>(), 0.0);
    EXPECT_LE(a.get<double>(), 1.0);
  }
  EXPECT_GT(spec.at("acceptance_per_depth").at(0).get<double>(), 0.0);
  const json block = bench(
      "--policy exact:evict=lru --spec-select block:conf --pool 24 "
      "--union-slots 24",
      "spec_block.json");
  EXPECT_EQ(block.at("copies_source"), "logical");
  EXPECT_GT(block.at("copies_per_token").at("block").get<double>(), 0);
  EXPECT_EQ(block.at("copies_per_token").at("restore").get<double>(), 0);
  // On a link the blocks' layers are timed as tokens' are (compute was reported 0); the block
  // selector is not timed as policy time: null, not 0.
  const json linked = bench(
      "--policy exact:evict=lru --spec-select block:conf --pool 24 --union-slots 24 "
      "--link emulated:50,5",
      "spec_block_link.json");
  EXPECT_EQ(linked.at("copies_source"), "scheduler");
  EXPECT_GT(linked.at("compute_ms_per_token").at("moe").get<double>(), 0);
  EXPECT_GT(linked.at("compute_ms_per_token").at("attention").get<double>(), 0);
  EXPECT_TRUE(linked.at("host_ms_per_token").is_null());
  // Over text windows the drafts are teacher forced; a synthetic drafter can stand in there.
  const fs::path forced = temp("spec_synthetic.json");
  const auto r = test_support::run_cli(
      "bench -m " + kModel.string() + " -f " + kText.string() +
      " --windows 2 --window-len 48 --cache 24 --rounds 1 --warmup 0 --no-floor --policy "
      "psr:lambda=0.3,n=1 --link emulated:50,5 --draft synthetic:0.8 --draft-k 4 --spec-select "
      "rollback --json " +
      forced.string());
  ASSERT_EQ(r.status, 0) << r.output;
  const json c = read_json(forced).at("configurations").at(0);
  EXPECT_THAT(c.at("name").get<std::string>(), HasSubstr("synthetic:0.8"));
  const json& s = c.at("rounds").at(0).at("speculative");
  EXPECT_GT(s.at("tau").get<double>(), 2.0);
  EXPECT_NEAR(s.at("acceptance_per_depth").at(0).get<double>(), 0.8, 0.2);
  const auto refused =
      test_support::run_cli("bench -m " + kModel.string() + " --generate 8 --prompts " +
                            prompts.string() + " --draft synthetic:0.8");
  EXPECT_EQ(refused.status, 1) << refused.output;
  EXPECT_THAT(refused.output, HasSubstr("synthetic drafts follow a text"));
}

// Fewer windows than --windows asks (a short text): said, not only in the JSON.
TEST(BenchCli, FewerWindowsThanAskedIsSaid) {
  const fs::path text = temp("short.txt");
  {
    std::ifstream in(kText);
    std::string head(3000, '\0');
    in.read(head.data(), static_cast<std::streamsize>(head.size()));
    std::ofstream(text) << head.substr(0, static_cast<size_t>(in.gcount()));
  }
  const auto r = test_support::run_cli("bench -m " + kModel.string() + " -f " + text.string() +
                                       " --windows 100 --window-len 64 --rounds 1 --policy exact"
                                       " --cache 32 --no-floor -q");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_THAT(r.output, ::testing::HasSubstr("windows of the 100 asked (--windows)"));
}

TEST(BenchCli, ProfileWritesAProfileThatSimReads) {
  const fs::path out = temp("measured.json");
  const auto r = test_support::run_cli("profile -m " + kModel.string() + " -f " + kText.string() +
                                       " --cache 32 --windows 1 --window-len 16 "
                                       "--rounds 1 -o " +
                                       out.string());
  ASSERT_EQ(r.status, 0) << r.output;
  const schedule::HardwareProfile p = schedule::load_profile(out.string());
  EXPECT_EQ(p.name, "measured");
  EXPECT_EQ(p.layers, 8);
  EXPECT_EQ(p.experts, 64);
  EXPECT_GT(p.link_bandwidth_bytes_per_s, 0);
  EXPECT_GT(p.expert_bytes, 0);
  EXPECT_GT(p.attention_s, 0);
  EXPECT_GT(p.moe_per_expert_s, 0);
  EXPECT_GT(p.head_s, 0);
  // The compute comes from a run with every expert in a slot (copied when each window starts,
  // none while decoding), not from the measured cache's run slowed by its own reads.
  EXPECT_THAT(p.description, HasSubstr("every expert in a slot (no reads while decoding)"));
  EXPECT_THAT(r.output, HasSubstr("| compute: every expert in a slot@64 disk |"));
  const size_t row = r.output.find("| compute: every expert in a slot@64 disk |");
  ASSERT_NE(row, std::string::npos);
  const std::string line = r.output.substr(row, r.output.find('\n', row) - row);
  EXPECT_THAT(line, HasSubstr("| 0.00 + 0.00 (0.00, 0.00) | 0.000 |")) << line;
  // And again with the link reading beside it: the compute slowdown while copies transfer, a
  // fraction the simulator accepts.
  EXPECT_THAT(r.output, HasSubstr("| compute beside reads: every expert in a slot@64 disk |"));
  EXPECT_GE(p.link_compute_slowdown, 0.0);
  EXPECT_LT(p.link_compute_slowdown, 1.0);
  // And the link's reads beside that compute against the same reads alone right after: both
  // measured (reads happened), the slowdown a fraction the simulator accepts.
  const json written = read_json(out);
  EXPECT_GT(written["link"]["reads_beside_compute_GBps"].get<double>(), 0.0);
  EXPECT_GT(written["link"]["reads_alone_GBps"].get<double>(), 0.0);
  EXPECT_GE(p.link_transfer_slowdown, 0.0);
  EXPECT_LT(p.link_transfer_slowdown, 1.0);
  EXPECT_NEAR(p.link_transfer_slowdown,
              std::clamp(1.0 - written["link"]["reads_beside_compute_GBps"].get<double>() /
                                   written["link"]["reads_alone_GBps"].get<double>(),
                         0.0, 0.9),
              1e-9);
  // The link as fitted from the probe: at least one channel, pipelined.
  EXPECT_GE(p.link_channels, 1);
  EXPECT_TRUE(p.link_pipelined);
  // Only the disk link is measured.
  const auto bad = test_support::run_cli("profile -m " + kModel.string() + " -f " + kText.string() +
                                         " --link resident -o " + out.string());
  EXPECT_NE(bad.status, 0);
  EXPECT_THAT(bad.output, HasSubstr("--link"));
}

// The probe's two facts become a link: 4 MB copies back to back at 2 GB/s (2 ms each at full
// speed), alone in 4.1 ms: two channels and 0.1 ms of latency.
TEST(FitDiskLink, ACopyAloneSlowerThanBackToBackMeansSeveralChannels) {
  const FittedLink two = fit_disk_link(2e9, 4.1e-3, 4'000'000);
  EXPECT_EQ(two.channels, 2);
  EXPECT_NEAR(two.latency_s, 0.1e-3, 1e-9);
  // Within rounding of 2 channels' time (1.975): still 2, no negative latency.
  const FittedLink rounded = fit_disk_link(2e9, 3.95e-3, 4'000'000);
  EXPECT_EQ(rounded.channels, 2);
  EXPECT_EQ(rounded.latency_s, 0.0);
  // Alone about as fast as back to back: one stream, the rest latency.
  const FittedLink one = fit_disk_link(2e9, 2.5e-3, 4'000'000);
  EXPECT_EQ(one.channels, 1);
  EXPECT_NEAR(one.latency_s, 0.5e-3, 1e-9);
  EXPECT_EQ(fit_disk_link(2e9, 1e-3, 4'000'000).channels, 1);  // faster alone: noise
  EXPECT_EQ(fit_disk_link(2e9, 1.0, 4'000'000).channels, 64);  // capped
  EXPECT_EQ(fit_disk_link(0, 1e-3, 4'000'000).channels, 1);    // nothing measured
}

// A probe becomes the link fit_disk_link gives, carrying the probe's copy size; the rest of the
// profile (compute, host time, the compute slowdown beside reads) stays.
TEST(FitDiskLink, AProbedLinkReplacesOnlyTheProfilesLink) {
  schedule::HardwareProfile p;
  p.link_bandwidth_bytes_per_s = 1e6;
  p.link_latency_s = 1.0;
  p.link_channels = 7;
  p.link_pipelined = false;
  p.link_compute_slowdown = 0.25;
  p.expert_bytes = 1;
  p.attention_s = 3e-5;
  p.moe_per_expert_s = 4e-5;
  p.head_s = 5e-4;
  p.host_policy_s = 1e-6;
  const DiskProbe probe{.bytes_per_s = 2e9, .copy_latency_s = 4.1e-3, .expert_bytes = 4'000'000};
  const schedule::HardwareProfile q = with_probed_link(p, probe);
  EXPECT_EQ(q.link_bandwidth_bytes_per_s, 2e9);
  EXPECT_EQ(q.link_channels, 2);
  EXPECT_NEAR(q.link_latency_s, 0.1e-3, 1e-9);
  EXPECT_TRUE(q.link_pipelined);
  EXPECT_EQ(q.expert_bytes, 4'000'000);
  EXPECT_EQ(q.link_compute_slowdown, 0.25);
  EXPECT_EQ(q.attention_s, 3e-5);
  EXPECT_EQ(q.moe_per_expert_s, 4e-5);
  EXPECT_EQ(q.head_s, 5e-4);
  EXPECT_EQ(q.host_policy_s, 1e-6);
}

// `bench --probe-rounds`: every timed round of a disk configuration is preceded by a probe of its
// own, recorded in the JSON, and `--predict` simulates that round with the probed link and the
// profile's compute scaled to the floor row's mean time over the run. The profile given here has
// a link 10,000 times slower than any disk: a round predicted with it instead of with its probe
// would be off by orders of magnitude; the row's figure is the mean of its rounds'. The floor
// row reads nothing and is not probed.
TEST(BenchCli, ProbeRoundsPredictEachRoundWithTheLinkProbedBeforeIt) {
  const fs::path profile = temp("slow_link.json");
  {
    std::ofstream f(profile);
    f << R"({"name": "slow_link", "description": "a link no disk is as slow as",
             "model": {"name": "steer-olmoe-small", "layers": 8, "experts": 64, "top_k": 8},
             "link": {"bandwidth_GBps": 0.0001, "latency_us": 10, "pipelined": true,
                      "channels": 1, "compute_slowdown": 0},
             "expert_bytes": 49152,
             "compute_us": {"attention": 12, "moe_fixed": 0, "moe_per_expert": 4.5,
                            "dense_per_token": 0, "head": 50},
             "host_policy_us": 1.2})";
  }
  const fs::path out = temp("bench_probe_rounds.json");
  const auto r = test_support::run_cli(
      "bench -m " + kModel.string() + " -f " + kText.string() +
      " --policy exact:evict=lru psr:lambda=0.3,n=1 --cache 24 --link disk --windows 2 "
      "--window-len 16 --rounds 2 --probe-rounds 2 --predict " +
      profile.string() + " --json " + out.string());
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("each round with the link probed before it"));
  const json doc = read_json(out);
  EXPECT_EQ(doc.at("probe_rounds_mib"), 2);
  const json* floor = nullptr;
  for (const json& c : doc.at("configurations"))
    if (c.at("resident").get<bool>()) floor = &c;
  ASSERT_NE(floor, nullptr);
  const double floor_simulated = floor->at("simulated_ms_per_token").get<double>();
  const double floor_measured =
      (floor->at("rounds").at(0).at("ms_per_token").at("mean").get<double>() +
       floor->at("rounds").at(1).at("ms_per_token").at("mean").get<double>()) /
      2;
  EXPECT_NEAR(doc.at("compute_scale").get<double>(), floor_measured / floor_simulated,
              1e-9 * floor_measured / floor_simulated);
  int rows = 0;
  for (const json& c : doc.at("configurations")) {
    const std::string name = c.at("name").get<std::string>();
    if (c.at("resident").get<bool>()) {
      EXPECT_FALSE(c.contains("simulated_probed_ms_per_token")) << name;
      for (const json& round : c.at("rounds")) EXPECT_FALSE(round.contains("probe")) << name;
      continue;
    }
    ++rows;
    const double from_profile = c.at("simulated_ms_per_token").get<double>();
    double sum = 0;
    ASSERT_EQ(c.at("rounds").size(), 2u) << name;
    for (size_t i = 0; i < 2; ++i) {
      const json& round = c.at("rounds").at(i);
      const json& probe = round.at("probe");
      EXPECT_GT(probe.at("gb_per_s").get<double>(), 0.001) << name;
      EXPECT_GT(probe.at("copy_latency_ms").get<double>(), 0) << name;
      EXPECT_GE(probe.at("copies").get<int>(), 8) << name;
      EXPECT_GE(probe.at("warm_copies").get<int>(), probe.at("copies").get<int>()) << name;
      const double each = round.at("simulated_probed_ms_per_token").get<double>();
      EXPECT_GT(each, 0) << name;
      EXPECT_LT(each, from_profile / 100) << name;
      sum += each;
      // Its split: the profile's compute for every token at the run's scale (no slowdown in
      // this profile: head 50 us + 8 layers x (attention 12 + 8 experts x 4.5)); the rest of
      // the time is the 8 layers' host time, 1.2 us each at that scale, and the stall before
      // the MoEs, which exact LRU's demand copies always cause.
      const double scale = doc.at("compute_scale").get<double>();
      const double stall = round.at("simulated_probed_stall_ms_per_token").get<double>();
      const double compute = round.at("simulated_probed_compute_ms_per_token").get<double>();
      EXPECT_NEAR(compute, (50 + 8 * (12 + 8 * 4.5)) * 1e-3 * scale, 1e-6) << name;
      EXPECT_NEAR(each - stall - compute, 8 * 1.2e-3 * scale, 1e-6) << name;
      if (name.starts_with("exact")) {
        EXPECT_GT(stall, 0) << name;
      }
    }
    const double probed = c.at("simulated_probed_ms_per_token").get<double>();
    EXPECT_NEAR(probed, sum / 2, 1e-9 * sum) << name;
    // A slower link copies no faster: the prediction moves up with it, down with a faster one.
    const double slower = c.at("simulated_probed_link_10pct_slower_ms_per_token").get<double>();
    const double faster = c.at("simulated_probed_link_10pct_faster_ms_per_token").get<double>();
    EXPECT_GT(slower, probed) << name;
    EXPECT_LT(faster, probed) << name;
  }
  EXPECT_EQ(rows, 2);
  // With every expert in a slot nothing is copied while decoding: each round's prediction is the
  // profile's compute floor at the run's scale, i.e. the floor row's mean time.
  const fs::path all = temp("bench_probe_rounds_all.json");
  const auto every = test_support::run_cli(
      "bench -m " + kModel.string() + " -f " + kText.string() +
      " --policy exact:evict=lru --cache 64 --link disk --windows 2 --window-len 16 --rounds 2 "
      "--probe-rounds 2 --predict " +
      profile.string() + " --json " + all.string());
  ASSERT_EQ(every.status, 0) << every.output;
  const json all_doc = read_json(all);
  const json& slots = all_doc.at("configurations").at(0);
  const json& floor_rounds = all_doc.at("configurations").at(1).at("rounds");
  ASSERT_FALSE(slots.at("resident").get<bool>());
  const double floor_ms = (floor_rounds.at(0).at("ms_per_token").at("mean").get<double>() +
                           floor_rounds.at(1).at("ms_per_token").at("mean").get<double>()) /
                          2;
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_NEAR(slots.at("rounds").at(i).at("simulated_probed_ms_per_token").get<double>(),
                floor_ms, 1e-9 * floor_ms)
        << "round " << i;
    EXPECT_EQ(slots.at("rounds").at(i).at("simulated_probed_stall_ms_per_token").get<double>(), 0)
        << "round " << i;
  }
  // Nothing copied: the link's rate moves nothing.
  EXPECT_NEAR(slots.at("simulated_probed_link_10pct_slower_ms_per_token").get<double>(), floor_ms,
              1e-9 * floor_ms);
  EXPECT_NEAR(slots.at("simulated_probed_link_10pct_faster_ms_per_token").get<double>(), floor_ms,
              1e-9 * floor_ms);
  // Only the disk link is probed.
  const auto refused = test_support::run_cli("bench -m " + kModel.string() + " -f " +
                                             kText.string() + " --probe-rounds 2 --rounds 1");
  EXPECT_NE(refused.status, 0);
  EXPECT_THAT(refused.output, HasSubstr("--probe-rounds"));
  EXPECT_THAT(refused.output, HasSubstr("expected --link disk"));
}

// What `profile` times compute beside: the disk link reading on a thread of its own until the
// object goes.
TEST(BackgroundReads, KeepReadingUntilDestroyed) {
  const auto m = model::Model::load(kModel);
  const auto start = std::chrono::steady_clock::now();
  BackgroundReads reads(*m);
  const int64_t expert = static_cast<int64_t>(model::expert_layout(*m).expert_bytes(0, 0));
  while (reads.bytes_read() < 3 * expert &&
         std::chrono::steady_clock::now() - start < std::chrono::seconds(30))
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_GE(reads.bytes_read(), 3 * expert);  // several copies, one after another
  // Stopped: what it read, in how long; the counts stay put, a second stop changes nothing.
  const BackgroundReads::Done done = reads.stop();
  EXPECT_GE(done.copies, 3);
  EXPECT_GE(done.bytes, int64_t{done.copies} * expert);
  EXPECT_GT(done.seconds, 0.0);
  EXPECT_LT(done.seconds, 60.0);
  const BackgroundReads::Done again = reads.stop();
  EXPECT_EQ(again.bytes, done.bytes);
  EXPECT_EQ(reads.sample().copies, done.copies);
}

// The same reads with nothing beside them, for about as long as asked.
TEST(BackgroundReads, AloneReadsForTheTimeAsked) {
  const auto m = model::Model::load(kModel);
  const auto start = std::chrono::steady_clock::now();
  const BackgroundReads::Done alone = reads_alone(*m, 0.2, 5);
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_GE(wall, 0.2);
  EXPECT_GT(alone.copies, 0);
  EXPECT_GT(alone.bytes, 0);
  EXPECT_GT(alone.seconds, 0.0);
  EXPECT_LE(alone.seconds, wall);
}

// The all-resident store copies every expert once into an arena of its own (2 MiB pages where
// the kernel gives them), byte for byte, instead of reading the mapping's 4 KiB pages.
TEST(ResidentStore, EveryExpertIsAnArenaCopyOfTheMappedBytes) {
  const auto m = model::Model::load(kModel);
  const model::ModelConfig& cfg = m->config();
  const auto params = test_support::offload_params(*m, "exact:evict=lru", cfg.experts);
  ExpertCache cache(*m, params.offload, {});
  EXPECT_TRUE(cache.experts_in_place());
  const link::ExpertLayout layout = model::expert_layout(*m);
  // The arena's start: expert 0's first part (its gate) lies at that part's slot offset.
  const auto* arena_base =
      static_cast<const std::byte*>(cache.expert(0, layout.model_layer(0), 0, 0).gate.data) -
      layout.parts(0, 0)[0].slot_offset;
  ASSERT_EQ(reinterpret_cast<uintptr_t>(arena_base) % 4096, 0u);
  for (int moe = 0; moe < layout.layers(); ++moe) {
    const int layer = layout.model_layer(moe);
    for (int e = 0; e < cfg.experts; ++e) {
      const model::SwigluWeights& copy = cache.expert(moe, layer, e, 0);
      const model::SwigluWeights& mapped = m->layer(layer).experts[static_cast<size_t>(e)];
      const kernels::Matrix* pairs[3][2] = {
          {&copy.gate, &mapped.gate}, {&copy.up, &mapped.up}, {&copy.down, &mapped.down}};
      for (const auto& [c, o] : pairs) {
        ASSERT_NE(c->data, o->data) << moe << " " << e;  // not read in place
        EXPECT_EQ(c->dtype, o->dtype);
        EXPECT_EQ(c->rows, o->rows);
        EXPECT_EQ(c->cols, o->cols);
        const uint64_t bytes = model::matrix_bytes(*o);
        ASSERT_EQ(std::memcmp(c->data, o->data, bytes), 0) << moe << " " << e;
        // Inside one arena of slot_bytes per expert, slot e of layer moe.
        const auto offset = static_cast<const std::byte*>(c->data) - arena_base;
        EXPECT_GE(offset, 0);
        EXPECT_EQ(static_cast<uint64_t>(offset) / layout.slot_bytes(),
                  static_cast<uint64_t>(moe) * cfg.experts + e);
      }
      // Another slot index reads the same copy (every expert has its own).
      EXPECT_EQ(cache.expert(moe, layer, e, 3).gate.data, copy.gate.data);
    }
  }
}

// Where the arena would not fit (here: a cap below it), the experts are read in place from the
// mapping, as before the arena: slower, never killed for memory.
TEST(ResidentStore, ExpertsThatDoNotFitAreReadInPlace) {
  const auto m = model::Model::load(kModel);
  const auto params = test_support::offload_params(*m, "exact:evict=lru", m->config().experts);
  ::setenv("STEERMOE_MAX_ALLOC_BYTES", "4096", 1);
  ExpertCache cache(*m, params.offload, {});
  ::unsetenv("STEERMOE_MAX_ALLOC_BYTES");
  const int layer = model::expert_layout(*m).model_layer(0);
  EXPECT_TRUE(cache.experts_in_place());
  EXPECT_EQ(cache.expert(0, layer, 5, 0).gate.data, m->layer(layer).experts[5].gate.data);
}

TEST(MemoryPlan, PartsAddUpAndABudgetThatCannotHoldThemSaysWhatCWould) {
  const auto m = model::Model::load(kModel);
  const auto disk = test_support::offload_params(*m, "exact:evict=lru", 16, "disk").offload;
  const MemoryPlan plan = plan_memory(*m, disk, 256);
  EXPECT_EQ(plan.weight_bytes, plan.expert_bytes + plan.non_expert_bytes);
  EXPECT_EQ(plan.in_place_bytes, 0u);  // disk: experts live in the slots only
  EXPECT_EQ(plan.slot_bytes, plan.slot_bytes_per_c * 16);
  EXPECT_GT(plan.kv_bytes, 0u);
  EXPECT_NO_THROW(check_memory_budget(plan, disk, plan.total(), 8, 64));
  // One slot per layer short: the message names the parts and the cache that fits (15).
  try {
    check_memory_budget(plan, disk, plan.total() - plan.slot_bytes_per_c, 8, 64);
    FAIL() << "accepted a budget one slot per layer short";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("--mem-limit"));
    EXPECT_THAT(e.what(), HasSubstr("--cache 15"));
    EXPECT_THAT(e.what(), HasSubstr("slots"));
  }
  // Room for fewer than top-k slots: the message names the slots' need beside the fixed parts
  // (it named only the fixed parts, which fit).
  const uint64_t fixed = plan.total() - plan.slot_bytes;
  try {
    check_memory_budget(plan, disk, fixed + 7 * plan.slot_bytes_per_c, 8, 64);
    FAIL() << "accepted a budget below top-k slots";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("not even --cache 8 (top-k) fits: its slots need " +
                                    bytes_text(8 * plan.slot_bytes_per_c) + " beside the " +
                                    bytes_text(fixed)));
  }
  // Resident: every expert counts, and no cache size helps.
  const auto resident = test_support::offload_params(*m, "exact:evict=lru", 64).offload;
  const MemoryPlan all = plan_memory(*m, resident, 256);
  EXPECT_EQ(all.in_place_bytes, all.expert_bytes);
  EXPECT_THROW(check_memory_budget(all, resident, all.total() - 1, 8, 64), Error);
  // A context whose KV cache alone overflows the budget names -c, not the link (it had said
  // "use --link disk", which could not help).
  const MemoryPlan long_context = plan_memory(*m, resident, 1 << 20);
  try {
    check_memory_budget(long_context, resident, long_context.kv_bytes / 2, 8, 64);
    FAIL() << "accepted a budget below the KV cache";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("even without the experts"));
    EXPECT_THAT(e.what(), HasSubstr("lower -c"));
    EXPECT_THAT(e.what(), ::testing::Not(HasSubstr("--link disk")));
  }
}

// What the page cache holds of a file, by mincore: the --mem-limit warning about pages charged
// to another cgroup rests on it.
TEST(MemoryBudget, CachedFileBytesSeesThePageCache) {
  const fs::path path = fs::temp_directory_path() / "steermoe_cached_file_bytes.bin";
  constexpr size_t kBytes = size_t{4} << 20;
  {
    std::ofstream out(path, std::ios::binary);
    const std::vector<char> data(kBytes, 7);
    out.write(data.data(), static_cast<std::streamsize>(data.size()));
  }
  const int fd = ::open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);  // clean pages leave the cache
  EXPECT_LT(cached_file_bytes(path.string()), kBytes / 2);
  std::vector<char> back(kBytes);
  ASSERT_EQ(::pread(fd, back.data(), kBytes, 0), static_cast<ssize_t>(kBytes));
  EXPECT_EQ(cached_file_bytes(path.string()), kBytes);
  ::close(fd);
  EXPECT_EQ(cached_file_bytes((fs::temp_directory_path() / "steermoe_no_such_file").string()), 0u);
  fs::remove(path);
}

TEST(MemoryBudget, ByteCountsAndTheCgroup) {
  EXPECT_EQ(parse_byte_count("3G", "--mem-limit"), uint64_t{3} << 30);
  EXPECT_EQ(parse_byte_count("800MB", "--mem-limit"), 800'000'000u);
  EXPECT_EQ(parse_byte_count("2.5GiB", "--mem-limit"), uint64_t{5} << 29);
  EXPECT_EQ(parse_byte_count("4096", "--mem-limit"), 4096u);
  EXPECT_EQ(parse_byte_count("1.5e3K", "--mem-limit"), 1'536'000u);
  for (const char* bad :
       {"", "G", "-1G", "3X", "0", "1e30", "0x10", "0x1p30", " 3G", "infG", "nan", "+3G"})
    EXPECT_THROW(parse_byte_count(bad, "--mem-limit"), Error) << bad;
  // The cgroup itself needs write access to this process's cgroup folder (root here; a user
  // without it is told how to set the budget from outside).
  try {
    const MemoryBudget b = MemoryBudget::enter(uint64_t{512} << 20);
    EXPECT_EQ(b.limit_bytes(), uint64_t{512} << 20);
    EXPECT_TRUE(fs::exists(b.path()));
    const auto usage = b.usage_bytes();
    ASSERT_TRUE(usage.has_value());
    EXPECT_LT(*usage, uint64_t{512} << 20);
  } catch (const Error& e) {
    GTEST_SKIP() << "no writable memory cgroup here: " << e.what();
  }
}

// A limit below what the process already holds would have the kernel kill it the moment it
// enters the cgroup (no message, exit 137); it is refused before, naming the flag. And cgroups
// left by processes killed inside their budget (no destructor ran) are removed by the next one.
TEST(MemoryBudget, ALimitBelowWhatTheProcessHoldsIsRefusedAndStaleCgroupsGo) {
  try {
    const MemoryBudget b = MemoryBudget::enter(uint64_t{4} << 20);
    FAIL() << "entered a 4 MiB budget at " << b.path();
  } catch (const Error& e) {
    const std::string what = e.what();
    if (what.find("expected to create a memory cgroup") != std::string::npos)
      GTEST_SKIP() << "no writable memory cgroup here: " << what;
    EXPECT_THAT(what, HasSubstr("--mem-limit"));
    EXPECT_THAT(what, HasSubstr("expected at least"));
  }
  fs::path stale;
  {
    const MemoryBudget first = MemoryBudget::enter(uint64_t{512} << 20);
    // A sibling as a killed process leaves it: named for a pid that cannot exist, empty.
    stale = fs::path(first.path()).parent_path() / "steermoe-4294967295";
    fs::create_directory(stale);
    ASSERT_TRUE(fs::exists(stale));
  }
  {
    const MemoryBudget second = MemoryBudget::enter(uint64_t{512} << 20);
    EXPECT_FALSE(fs::exists(stale)) << stale;
  }
  std::error_code ec;
  fs::remove(stale, ec);
}

}  // namespace
}  // namespace steermoe::engine
