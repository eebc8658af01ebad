// Offloaded decoding: experts really move (disk, emulated link) or are timed (sim), and the
// output never depends on how: logits and routing are bit-identical across links, copy speeds,
// injected delays, max_inflight and thread counts; the physical: demonstration mode is the one
// exception and is shown to change with the schedule. Faults end the request with a clear error,
// and the disk link keeps resident memory bounded by the cache.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "../offload_params.hpp"
#include "common/error.hpp"
#include "engine/engine.hpp"
#include "trace/calibration_file.hpp"

namespace steermoe::engine {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

const fs::path kTiny = fs::path(STEERMOE_SOURCE_DIR) / "models" / "steer-olmoe-tiny";

fs::path temp(const std::string& name) {
  return fs::path(testing::TempDir()) /
         ("offload_" + std::to_string(static_cast<long>(getpid())) + "_" + name);
}

struct Outcome {
  std::vector<float> logits;  // [tokens][vocab]
  RoutingRecord record;
  CacheStats totals;  // the expert cache's (copies: zero without a link)
};

std::vector<int32_t> tokens(int vocab, int n) {
  std::vector<int32_t> ids;
  for (int i = 0; i < n; ++i) ids.push_back((i * 131 + 17) % vocab);
  return ids;
}

// Prompt of 6 tokens (prefill), then 18 tokens decoded one at a time, twice (two requests).
Outcome run(const model::Model& m, EngineParams p) {
  Outcome r;
  p.context = 32;
  Engine e(m, p);
  e.set_recorder(&r.record);
  const auto V = static_cast<size_t>(m.config().vocab);
  const std::vector<int32_t> ids = tokens(m.config().vocab, 24);
  for (int request = 0; request < 2; ++request) {
    e.reset();
    const std::span<const int32_t> prompt(ids.data(), 6);
    std::vector<float> prompt_logits(prompt.size() * V);
    e.prefill(prompt, prompt_logits);
    r.logits.insert(r.logits.end(), prompt_logits.begin(), prompt_logits.end());
    for (size_t i = 6; i < ids.size(); ++i) {
      const auto l = e.decode(ids[i]);
      r.logits.insert(r.logits.end(), l.begin(), l.end());
    }
  }
  r.totals = e.cache_stats();
  return r;
}

class OffloadTiny : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = model::Model::load(kTiny).release();
    calib_ = new policy::Calibration(trace::read_calibration(kTiny / "calib.smcal"));
  }
  static void TearDownTestSuite() {
    delete model_;
    delete calib_;
  }
  static EngineParams params(const std::string& policy, int cache, const std::string& link) {
    return test_support::offload_params(*model_, policy, cache, link, calib_);
  }
  static model::Model* model_;
  static policy::Calibration* calib_;
};
model::Model* OffloadTiny::model_ = nullptr;
policy::Calibration* OffloadTiny::calib_ = nullptr;

TEST_F(OffloadTiny, OutputIsBitIdenticalWhateverTheLinkSpeedDelaysInflightAndThreads) {
  for (const char* policy : {"psr:lambda=0.3,n=1", "exact:evict=a,n=2", "cacheprior:lambda=0.2"}) {
    SCOPED_TRACE(policy);
    const Outcome reference = run(*model_, params(policy, 32, "resident"));
    ASSERT_FALSE(reference.record.selected.empty());
    struct Variant {
      std::string link;
      int max_inflight;
      int threads;
      double delay_s;
      schedule::PrefetchPacing pacing = schedule::PrefetchPacing::kFifo;
      schedule::PrefetchIssue issue = schedule::PrefetchIssue::kBoundary;
      schedule::MoeWait moe_wait = schedule::MoeWait::kAll;
    };
    constexpr auto kEarly = schedule::PrefetchIssue::kEarly;
    constexpr auto kBoundary = schedule::PrefetchIssue::kBoundary;
    constexpr auto kReady = schedule::MoeWait::kReady;
    using schedule::PrefetchPacing;
    const std::vector<Variant> variants = {
        {"disk", 2, 1, 0},
        {"disk", 1, 2, 0},
        {"emulated:50", 4, 1, 0},
        {"emulated:0.5,30", 1, 1, 0},
        {"emulated:20,5", 2, 2, 200e-6},
        {"sim:rtx4090-olmoe", 1, 1, 0},
        {"sim:rtx4090-olmoe", 4, 1, 0},
        {"sim:cpu-disk-olmoe", 2, 1, 0},
        {"disk", 2, 1, 0, PrefetchPacing::kDefer},
        {"emulated:0.5,30", 1, 1, 0, PrefetchPacing::kDemand},
        {"sim:cpu-disk-olmoe", 2, 1, 0, PrefetchPacing::kDefer},
        {"disk", 1, 2, 0, PrefetchPacing::kFifo, kEarly},
        {"emulated:20,5", 2, 1, 200e-6, PrefetchPacing::kDefer, kEarly},
        {"sim:cpu-disk-olmoe", 1, 1, 0, PrefetchPacing::kFifo, kEarly},
        // A layer's MoE in parts as its copies complete: the cache refuses an expert whose
        // copy has not, so a part that took one would end the run with an error.
        {"disk", 2, 2, 0, PrefetchPacing::kFifo, kBoundary, kReady},
        {"emulated:0.5,30", 1, 1, 0, PrefetchPacing::kFifo, kBoundary, kReady},
        {"emulated:20,5", 2, 2, 200e-6, PrefetchPacing::kDefer, kEarly, kReady},
        {"sim:cpu-disk-olmoe", 2, 1, 0, PrefetchPacing::kFifo, kBoundary, kReady}};
    for (const Variant& v : variants) {
      SCOPED_TRACE(v.link + " max_inflight " + std::to_string(v.max_inflight) + " threads " +
                   std::to_string(v.threads) + " delay " + std::to_string(v.delay_s) + " pacing " +
                   schedule::pacing_name(v.pacing) + " issue " + schedule::issue_name(v.issue) +
                   " moe wait " + schedule::moe_wait_name(v.moe_wait));
      EngineParams p = params(policy, 32, v.link);
      p.offload.max_inflight = v.max_inflight;
      p.offload.pacing = v.pacing;
      p.offload.issue = v.issue;
      p.offload.moe_wait = v.moe_wait;
      p.threads = v.threads;
      p.test_copy_delay_max_s = v.delay_s;
      const Outcome got = run(*model_, p);
      EXPECT_EQ(got.record.selected, reference.record.selected);
      EXPECT_EQ(got.logits, reference.logits);  // bit for bit
      // Copies were really made (and only logical copies can be compared across schedules).
      EXPECT_GT(got.totals.demand + got.totals.prefetch, 0);
    }
  }
}

TEST_F(OffloadTiny, ExactRoutingGivesTheSameOutputAtEveryCacheSizeAndLink) {
  const Outcome reference = run(*model_, params("exact:evict=lru", 0, "resident"));
  for (const int cache : {8, 16, 40, 64}) {
    for (const char* link : {"disk", "emulated:10,2"}) {
      SCOPED_TRACE(std::string(link) + " cache " + std::to_string(cache));
      const Outcome got = run(*model_, params("exact:evict=lru", cache, link));
      EXPECT_EQ(got.logits, reference.logits);
      EXPECT_EQ(got.record.selected, reference.record.selected);
    }
  }
}

TEST_F(OffloadTiny, PhysicalRoutingDependsOnTheScheduleLogicalRoutingDoesNot) {
  // The paper's Table 1 in the engine: the bonus goes to experts whose copies were issued, so
  // the executed experts (and the logits) change with max_inflight and the link speed. Under the
  // simulated clock every schedule is deterministic, so each one reproduces itself.
  const std::string physical = "physical:psr:lambda=0.3,n=8";
  auto with = [&](const std::string& policy, const std::string& link, int inflight) {
    EngineParams p = params(policy, 16, link);
    p.offload.max_inflight = inflight;
    return run(*model_, p);
  };
  const Outcome a = with(physical, "sim:rtx4090-olmoe", 1);
  const Outcome b = with(physical, "sim:rtx4090-olmoe", 4);
  const Outcome c = with(physical, "sim:cpu-disk-olmoe", 1);
  EXPECT_NE(a.record.selected, b.record.selected);
  EXPECT_NE(a.record.selected, c.record.selected);
  EXPECT_NE(a.logits, b.logits);
  EXPECT_EQ(with(physical, "sim:rtx4090-olmoe", 1).record.selected, a.record.selected);
  const std::string logical = "psr:lambda=0.3,n=8";
  const Outcome la = with(logical, "sim:rtx4090-olmoe", 1);
  EXPECT_EQ(with(logical, "sim:rtx4090-olmoe", 4).logits, la.logits);
  EXPECT_EQ(with(logical, "sim:cpu-disk-olmoe", 1).logits, la.logits);
}

TEST_F(OffloadTiny, PrefetchesAreCopiedAheadOfTheirLayer) {
  // On a fast link PSR's prefetches arrive in time and its demand copies are rare; exact LRU
  // makes only demand copies. (Counts, not times: the figures are the scheduler's.)
  const Outcome psr = run(*model_, params("psr:lambda=0.3,n=1", 32, "emulated:100"));
  const Outcome lru = run(*model_, params("exact:evict=lru", 32, "emulated:100"));
  EXPECT_GT(psr.totals.prefetch, 0);
  EXPECT_GT(psr.totals.prefetch_in_time, 0);
  EXPECT_LT(psr.totals.demand, lru.totals.demand);
  EXPECT_EQ(lru.totals.prefetch, 0);
}

TEST_F(OffloadTiny, StallPartsAddUpToTheStallOnAWallClockLink) {
  // A slow link stalls on demand and late prefetch copies; the parts by kind are increments of
  // one clock reading to the next, so they sum to the total stall to rounding, not to within
  // the time the wait loop itself takes between readings.
  for (const char* policy : {"psr:lambda=0.3,n=2", "exact:evict=lru"}) {
    SCOPED_TRACE(policy);
    const Outcome o = run(*model_, params(policy, 16, "emulated:0.2,50"));
    const CacheStats& t = o.totals;
    ASSERT_GT(t.stall_s, 0);
    EXPECT_GT(t.stall_demand_s, 0);
    EXPECT_NEAR(t.stall_demand_s + t.stall_prefetch_s + t.stall_other_s, t.stall_s,
                t.stall_s * 1e-12);
  }
}

TEST_F(OffloadTiny, DiskLinkRejectsAModelFileModifiedWhileServed) {
  const fs::path dir = temp("modified");
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const char* f : {"config.json", "model.safetensors", "tokenizer.json"})
    fs::copy_file(kTiny / f, dir / f);
  auto m = model::Model::load(dir);
  EngineParams p = params("exact:evict=lru", 16, "disk");
  p.context = 64;
  Engine e(*m, p);
  const std::vector<int32_t> ids = tokens(m->config().vocab, 8);
  e.prefill(std::span<const int32_t>(ids.data(), 4));
  // Rewrite the first bytes in place (same size, new mtime): the link must notice before it
  // hands out another expert.
  {
    std::fstream f(dir / "model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(0);
    f.write("\0\0\0\0", 4);
  }
  std::string message;
  try {
    for (int i = 0; i < 40; ++i) e.decode(ids[static_cast<size_t>(i % 8)]);
  } catch (const Error& err) {
    message = err.what();
  }
  EXPECT_THAT(message, HasSubstr("model.safetensors"));
  EXPECT_THAT(message, HasSubstr("expert"));
  fs::remove_all(dir);
}

long rss_kib() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  }
  return -1;
}

TEST(OffloadMemory, DiskLinkResidentMemoryIsTheCacheNotTheExperts) {
  // A made model whose experts (2 layers x 64 x 1.5 MB = 192 MB) are 8x its cache at 12.5%
  // residency: decoding with the disk link must grow resident memory by about the non-expert
  // weights + the slots, never by the experts read.
  const fs::path dir = temp("memory");
  fs::remove_all(dir);
  fs::create_directories(dir);
  {
    std::ofstream cfg(dir / "config.json");
    cfg << R"({"model_type": "olmoe", "vocab_size": 300, "hidden_size": 256,
               "intermediate_size": 1024, "num_hidden_layers": 2, "num_attention_heads": 4,
               "num_key_value_heads": 4, "num_experts": 64, "num_experts_per_tok": 8,
               "max_position_embeddings": 256, "rms_norm_eps": 1e-5, "rope_theta": 10000.0})";
  }
  const fs::path gguf = dir / "model.gguf";
  const std::string cmd = std::string(STEERMOE_BINARY) + " make-model --arch olmoe --config " +
                          (dir / "config.json").string() + " --random --dtype bf16 -o " +
                          gguf.string() + " > /dev/null 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  auto m = model::Model::load(gguf);
  const long before = rss_kib();
  uint64_t slot_bytes = 0;
  {
    EngineParams params = test_support::offload_params(*m, "exact:evict=lru", 8, "disk");
    params.context = 64;
    Engine e(*m, params);
    slot_bytes = e.expert_cache().slot_memory_bytes();
    for (int32_t t : tokens(300, 48)) e.decode(t);
    const CacheStats totals = e.cache_stats();
    // Far more bytes went through the slots than they hold: the experts were really streamed.
    EXPECT_GT(static_cast<uint64_t>(totals.bytes), 2 * slot_bytes);
    const long grown_kib = rss_kib() - before;
    const uint64_t file = fs::file_size(gguf);
    const model::SwigluWeights& ex = m->layer(0).experts[0];
    const uint64_t expert =
        model::matrix_bytes(ex.gate) + model::matrix_bytes(ex.up) + model::matrix_bytes(ex.down);
    // Non-expert weights read per token (attention, routers, head, one embedding row).
    const uint64_t non_expert = m->bytes_per_token() - 2 * 8 * expert;
    const uint64_t bound = slot_bytes + non_expert + (24u << 20);  // + KV, scratch, threads
    EXPECT_LT(static_cast<uint64_t>(grown_kib) * 1024, bound)
        << "slots " << slot_bytes << ", file " << file;
    EXPECT_LT(bound, file / 2);  // the bound is meaningful: well below the file size
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace steermoe::engine
