// Decisions JSON lines, replay through RequestRouter (library and the built CLI), loop kinds.
#include <algorithm>
#include <cstdio>
#include <numeric>
#include <sstream>

#include "../cli_runner.hpp"
#include "../json_test_util.hpp"
#include "common/error.hpp"
#include "test_util.hpp"
#include "trace/calibration_file.hpp"
#include "trace/replay.hpp"
#include "trace/synth.hpp"
#include "trace/trace.hpp"

namespace steermoe::trace {
namespace {

using testing::ScratchDir;

std::string as_text(const std::vector<uint8_t>& bytes) {
  return std::string(bytes.begin(), bytes.end());
}

const std::string kShippedTrace = std::string(STEERMOE_SOURCE_DIR) + "/data/traces/synth-olmoe";
const std::string kShippedCalib = kShippedTrace + "/calib.smcal";

TEST(Decisions, LineRoundTrips) {
  DecisionRecord r;
  r.t = 12;
  r.layer = 3;
  r.selected = {4, 9, 17, 22, 31, 40, 51, 60};
  r.prefetch = {{17, 5}};
  r.demand = {{60, 11}, {4, 2}};
  r.evicted = {33, 2, 8};
  r.resident = {1, 4, 9, 17};
  const std::string line = decision_line(r);
  EXPECT_EQ(
      line.rfind(
          "{\"t\": 12, \"l\": 3, \"S\": [4, 9, 17, 22, 31, 40, 51, 60], \"prefetch\": [[17, 5]], "
          "\"demand\": [[60, 11], [4, 2]], \"evicted\": [33, 2, 8], \"resident\": [1, 4, 9, 17]}",
          0),
      0u);
  EXPECT_EQ(line.back(), '\n');
  EXPECT_EQ(parse_decision_line(line, "d.jsonl"), r);
  DecisionRecord empty;
  EXPECT_EQ(parse_decision_line(decision_line(empty), "d.jsonl"), empty);
}

TEST(Decisions, MalformedLinesAreRejected) {
  EXPECT_ERROR_MENTIONS(parse_decision_line("{\"t\": 1,", "d.jsonl:3"), "d.jsonl:3", "line",
                        "JSON object");
  EXPECT_ERROR_MENTIONS(
      parse_decision_line(
          R"({"l": 0, "S": [], "prefetch": [], "demand": [], "evicted": [], "resident": []})", "d"),
      "d: t:", "step index");
  EXPECT_ERROR_MENTIONS(
      parse_decision_line(
          R"({"t": 0, "l": 0, "S": [1, -2], "prefetch": [], "demand": [], "evicted": [], "resident": []})",
          "d"),
      "d: S:", "non-negative");
  EXPECT_ERROR_MENTIONS(
      parse_decision_line(
          R"({"t": 0, "l": 0, "S": [], "prefetch": [[1]], "demand": [], "evicted": [], "resident": []})",
          "d"),
      "d: prefetch:", "[expert, slot]");
  EXPECT_ERROR_MENTIONS(
      parse_decision_line(
          R"({"t": 0, "l": 0, "S": [], "prefetch": [], "demand": [], "evicted": []})", "d"),
      "d: resident:");
}

struct Replayed {
  ReplaySummary summary;
  std::vector<DecisionRecord> lines;
  nlohmann::json summary_line;
  std::string text;
};

Replayed replay_with_lines(const Trace& trace, const policy::Calibration& calib,
                           const std::string& policy, int cache) {
  std::ostringstream out;
  Replayed r;
  r.summary = replay_trace(
      trace, calib,
      {.policy = policy, .cache_slots = cache, .calibration_source = "calib", .decisions = &out});
  r.text = out.str();
  std::istringstream in(r.text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.find("\"summary\"") != std::string::npos) {
      r.summary_line = steermoe::parse_json_or_throw(line);
      continue;
    }
    r.lines.push_back(parse_decision_line(line, "decisions"));
  }
  return r;
}

TEST(Replay, ShippedTraceDecisionsAreConsistentWithTheSummary) {
  const Trace trace = Trace::open(kShippedTrace);
  const policy::Calibration calib = read_calibration(kShippedCalib);
  const Replayed r = replay_with_lines(trace, calib, "psr:lambda=0.3,n=1", 32);
  const int L = trace.layers(), K = trace.meta().top_k;
  ASSERT_EQ(r.lines.size(), static_cast<size_t>(trace.steps() * L));
  uint64_t demand = 0, prefetch = 0;
  for (size_t i = 0; i < r.lines.size(); ++i) {
    const DecisionRecord& d = r.lines[i];
    EXPECT_EQ(d.t, static_cast<int64_t>(i) / L);
    EXPECT_EQ(d.layer, static_cast<int>(i) % L);
    ASSERT_EQ(d.selected.size(), static_cast<size_t>(K));
    EXPECT_TRUE(std::is_sorted(d.selected.begin(), d.selected.end()));
    EXPECT_LE(d.resident.size(), 32u);
    EXPECT_TRUE(
        std::includes(d.resident.begin(), d.resident.end(), d.selected.begin(), d.selected.end()));
    EXPECT_LE(d.prefetch.size(), 1u);  // n = 1
    if (d.layer == 0) {
      EXPECT_TRUE(d.prefetch.empty());  // layer 1 has no pre-gate
    }
    for (const policy::Copy& c : d.prefetch) EXPECT_LT(c.slot, 32);
    for (const policy::Copy& c : d.demand) {
      EXPECT_TRUE(std::binary_search(d.selected.begin(), d.selected.end(), c.expert));
      EXPECT_LT(c.slot, 32);
    }
    demand += d.demand.size();
    prefetch += d.prefetch.size();
  }
  EXPECT_EQ(r.summary.totals().demand, demand);
  EXPECT_EQ(r.summary.totals().prefetch, prefetch);
  EXPECT_GT(prefetch, 0u);
  EXPECT_EQ(r.summary.tokens, 128);
  EXPECT_EQ(r.summary.sequences, 4);
  EXPECT_EQ(r.summary.loop, "open");
  EXPECT_GT(r.summary.replaced_fraction(), 0.0);
  EXPECT_LT(r.summary.replaced_fraction(), 1.0);
  EXPECT_EQ(r.summary_line["summary"], true);
  EXPECT_EQ(r.summary_line["tokens"], 128);
  EXPECT_DOUBLE_EQ(r.summary_line["per_token"]["copies"].get<double>(),
                   static_cast<double>(demand + prefetch) / 128.0);
}

TEST(Replay, SequenceStartsResetToTheWarmSet) {
  const Trace trace = Trace::open(kShippedTrace);
  const policy::Calibration calib = read_calibration(kShippedCalib);
  const Replayed r = replay_with_lines(trace, calib, "exact:evict=lru", 32);
  // At the first token of every sequence, layer l's resident set before the step is the warm set:
  // after the step it is the warm set plus the demanded experts minus the evicted ones.
  for (int64_t start : trace.sequence_starts()) {
    for (int l = 0; l < trace.layers(); ++l) {
      const DecisionRecord& d = r.lines[static_cast<size_t>(start * trace.layers() + l)];
      std::vector<int32_t> expected(calib.expert_order[static_cast<size_t>(l)].begin(),
                                    calib.expert_order[static_cast<size_t>(l)].begin() + 32);
      for (int32_t e : d.evicted) expected.erase(std::find(expected.begin(), expected.end(), e));
      for (const policy::Copy& c : d.demand) expected.push_back(c.expert);
      std::sort(expected.begin(), expected.end());
      EXPECT_EQ(d.resident, expected) << "t=" << start << " l=" << l;
    }
  }
}

TEST(Replay, ExactRoutingSelectsTheRoutersTopK) {
  const Trace trace = Trace::open(kShippedTrace);
  const policy::Calibration calib = read_calibration(kShippedCalib);
  const Replayed r = replay_with_lines(trace, calib, "exact:evict=a", 16);
  for (const DecisionRecord& d : r.lines)
    EXPECT_EQ(d.selected, testing::exact_top_k(trace.scores(d.t, d.layer), 8));
  EXPECT_EQ(r.summary.totals().replaced, 0u);
  EXPECT_EQ(r.summary.totals().prefetch, 0u);
  // Deterministic: a second run writes the same bytes.
  EXPECT_EQ(replay_with_lines(trace, calib, "exact:evict=a", 16).text, r.text);
}

// An 8-step synthetic trace of `sequences` sequences (vocabulary 64) written to `dir`.
void write_tiny_synth(const std::filesystem::path& dir, int sequences) {
  SynthParams p;
  p.tokens = 8;
  p.sequences = sequences;
  p.vocab = 64;
  synthesize_trace(p, dir);
}

// A trace without steps has nothing to replay: refused (as sim and calibrate refuse it), not a
// row of zeros called closed.
TEST(Replay, ATraceWithoutStepsIsRefused) {
  ScratchDir dir;
  write_tiny_synth(dir / "t", 1);
  const TraceMeta meta = Trace::open(dir / "t").meta();
  {
    TraceWriter empty(dir / "empty", meta, false);
    empty.close();
  }
  const Trace trace = Trace::open(dir / "empty");
  ASSERT_EQ(trace.steps(), 0);
  try {
    replay_trace(trace, read_calibration(kShippedCalib),
                 {.policy = "exact:evict=lru", .cache_slots = 32});
    FAIL() << "replayed a trace without steps";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("steps: expected a trace with at least one"));
  }
}

TEST(Replay, LoopIsClosedOnlyForTheRecordedPolicyAndCache) {
  ScratchDir dir;
  write_tiny_synth(dir / "t", 2);
  // Re-record the meta with the policy the trace was "recorded" under.
  nlohmann::json meta =
      steermoe::parse_json_or_throw(as_text(testing::read_bytes(dir / "t" / "meta.json")));
  meta["policy"] = "psr:lambda=0.3,n=1";
  meta["cache_slots"] = 32;
  testing::write_text(dir / "t" / "meta.json", steermoe::dump_json(meta));
  const Trace trace = Trace::open(dir / "t");
  const policy::Calibration calib = read_calibration(kShippedCalib);
  auto loop = [&](const std::string& policy, int cache) {
    return replay_trace(trace, calib,
                        {.policy = policy, .cache_slots = cache, .calibration_source = "c"})
        .loop;
  };
  EXPECT_EQ(loop("psr:lambda=0.3,n=1,w=8,evict=a", 32), "closed");  // same policy, spelled out
  EXPECT_EQ(loop("psr:lambda=0.3,n=1", 24), "open");
  EXPECT_EQ(loop("psr:lambda=0.5,n=1", 32), "open");
  EXPECT_EQ(loop("exact:evict=lru", 32), "open");
  // The policy reads the calibration: a trace that names the one it was recorded with is closed
  // only under that one (by contents, whatever the file is called); one that names none stays
  // closed, and says so.
  EXPECT_THAT(
      replay_trace(trace, calib, {.policy = "psr:lambda=0.3,n=1", .cache_slots = 32}).loop_reason,
      ::testing::HasSubstr("does not name its calibration"));
  policy::Calibration other = calib;
  std::swap(other.expert_order[0][0], other.expert_order[0][1]);
  meta["calibration"] = calibration_fingerprint(calib);
  testing::write_text(dir / "t" / "meta.json", steermoe::dump_json(meta));
  const Trace named = Trace::open(dir / "t");
  auto loop_with = [&](const policy::Calibration& c) {
    return replay_trace(named, c, {.policy = "psr:lambda=0.3,n=1", .cache_slots = 32}).loop;
  };
  EXPECT_EQ(loop_with(calib), "closed");
  EXPECT_EQ(loop_with(read_calibration(kShippedCalib)), "closed");
  EXPECT_EQ(loop_with(other), "open");
  EXPECT_NE(calibration_fingerprint(other), calibration_fingerprint(calib));
}

TEST(Replay, ExactRoutingOnAnExactTraceIsClosedLoop) {
  // Exact routing executes the router's top-K whatever the cache holds, so a trace recorded
  // under exact routing is its own closed loop at any cache size; sim classifies the same way.
  const Trace trace = Trace::open(kShippedTrace);
  const policy::Calibration calib = read_calibration(kShippedCalib);
  for (const char* policy : {"exact:evict=lru", "exact:evict=a,n=2"}) {
    for (int cache : {16, 32}) {
      const auto r = replay_trace(
          trace, calib, {.policy = policy, .cache_slots = cache, .calibration_source = "c"});
      EXPECT_EQ(r.loop, "closed") << policy;
    }
  }
  EXPECT_EQ(replay_trace(
                trace, calib,
                {.policy = "cacheprior:lambda=0.2", .cache_slots = 32, .calibration_source = "c"})
                .loop,
            "open");
}

TEST(Replay, RejectsUnknownPolicyKeysBadCacheAndMismatchedCalibration) {
  const Trace trace = Trace::open(kShippedTrace);
  const policy::Calibration calib = read_calibration(kShippedCalib);
  EXPECT_ERROR_MENTIONS(
      replay_trace(trace, calib, {.policy = "psr:lambda=0.3,bogus=1", .cache_slots = 32}), "bogus");
  EXPECT_ERROR_MENTIONS(replay_trace(trace, calib, {.policy = "psr:lambda=0.3", .cache_slots = 4}),
                        "4");
  policy::RouterSpec spec;
  spec.layers = 2;
  spec.experts = 64;
  spec.top_k = 8;
  EXPECT_ERROR_MENTIONS(
      replay_trace(
          trace, policy::uninformed_calibration(spec),
          {.policy = "exact:evict=lru", .cache_slots = 32, .calibration_source = "other.smcal"}),
      "other.smcal", "L=16 E=64 K=8", "found L=2");
}

using steermoe::test_support::run_cli;  // (exit status, stdout + stderr)

TEST(ReplayCli, ReadmeDemoRunsOnTheShippedTrace) {
  ScratchDir dir;
  const auto [status, out] =
      run_cli("replay --trace " + kShippedTrace + " --calib " + kShippedCalib +
              " --policy psr:lambda=0.3,n=1 --policy exact:evict=lru --cache 32 --json " +
              (dir / "s.json").string() + " --decisions " + (dir / "d.jsonl").string());
  ASSERT_EQ(status, 0) << out;
  EXPECT_THAT(out, ::testing::HasSubstr("\"loop\":\"open\""));
  EXPECT_THAT(out, ::testing::HasSubstr("psr:lambda=0.3,n=1"));
  const nlohmann::json summaries =
      steermoe::parse_json_or_throw(as_text(testing::read_bytes(dir / "s.json")));
  ASSERT_EQ(summaries.size(), 2u);
  EXPECT_EQ(summaries[0]["tokens"], 128);
  EXPECT_GT(summaries[1]["per_token"]["demand"].get<double>(),
            summaries[0]["per_token"]["demand"].get<double>());
  // Two policies: two blocks of T*L decision lines, each ending with its summary.
  const std::vector<uint8_t> decisions = testing::read_bytes(dir / "d.jsonl");
  EXPECT_EQ(std::count(decisions.begin(), decisions.end(), '\n'), 2 * (128 * 16 + 1));
}

TEST(ReplayCli, BadInputsFailWithAMessageNotACrash) {
  const auto [status, out] =
      run_cli("replay --trace " + kShippedTrace + " --calib " + kShippedCalib +
              " --policy psr:lambda=0.3,colour=red --cache 32");
  EXPECT_EQ(status, 1) << out;
  EXPECT_THAT(out, ::testing::HasSubstr("colour"));
  const auto [status2, out2] = run_cli("replay --trace /nonexistent/trace --calib " +
                                       kShippedCalib + " --policy exact:evict=lru --cache 32");
  EXPECT_EQ(status2, 1);
  EXPECT_THAT(out2, ::testing::HasSubstr("/nonexistent/trace"));
  const auto [status3, out3] =
      run_cli("replay --trace " + kShippedTrace + " --calib " + kShippedTrace +
              "/meta.json --policy exact:evict=lru --cache 32");
  EXPECT_EQ(status3, 1);
  EXPECT_THAT(out3, ::testing::HasSubstr("meta.json: magic"));
}

TEST(ReplayCli, SynthCalibrateReplayPipeline) {
  ScratchDir dir;
  const std::string held = (dir / "held").string(), eval = (dir / "eval").string(),
                    cal = (dir / "c.smcal").string();
  ASSERT_EQ(
      run_cli("trace-synth --shape moonlight --tokens 24 --sequences 2 --vocab 500 --seed 7 -o " +
              held)
          .status,
      0);
  ASSERT_EQ(
      run_cli("trace-synth --shape moonlight --tokens 12 --sequences 3 --vocab 500 --seed 8 -o " +
              eval)
          .status,
      0);
  const auto [status, out] = run_cli("calibrate --trace " + held + " --cache 16 -o " + cal);
  ASSERT_EQ(status, 0) << out;
  const nlohmann::json report = steermoe::parse_json_or_throw(out);
  EXPECT_EQ(report["steps"], 24);
  EXPECT_EQ(report["warm_coverage"].size(), 26u);
  const auto [status2, out2] =
      run_cli("replay --trace " + eval + " --calib " + cal + " --policy psr:lambda=0.2 --cache 16");
  ASSERT_EQ(status2, 0) << out2;
  EXPECT_THAT(out2, ::testing::HasSubstr("\"sequences\":3"));
}

}  // namespace
}  // namespace steermoe::trace
