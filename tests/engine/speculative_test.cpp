// Speculative decoding on the shipped pair (steer-olmoe-small + steer-drafter-small): greedy
// verification commits exactly the target's greedy tokens, the KV caches roll back, and the
// acceptance rule of speculative sampling against a scalar reference and its distribution.
#include "engine/speculative.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "../offload_params.hpp"
#include "common/error.hpp"
#include "engine/engine.hpp"
#include "tokenizer/tokenizer.hpp"
#include "trace/calibration_file.hpp"

namespace steermoe::engine {
namespace {

namespace fs = std::filesystem;
const fs::path kModels = fs::path(STEERMOE_SOURCE_DIR) / "models";
const fs::path kHeldOut = fs::path(STEERMOE_SOURCE_DIR) / "data" / "text-small" / "heldout.txt";

// `count` prompts of 16 tokens each, from non-empty held-out lines.
std::vector<std::vector<int32_t>> prompts(const tokenizer::Tokenizer& tok, size_t count) {
  std::ifstream in(kHeldOut);
  std::vector<std::vector<int32_t>> out;
  for (std::string line; out.size() < count && std::getline(in, line);) {
    std::vector<int32_t> ids = tok.encode(line, {.parse_special = false});
    if (ids.size() < 16) continue;
    ids.resize(16);
    out.push_back(std::move(ids));
  }
  return out;
}

// At least `count` tokens of held-out text (whole lines, each with its newline).
std::vector<int32_t> heldout_text(const tokenizer::Tokenizer& tok, size_t count) {
  std::ifstream in(kHeldOut);
  std::vector<int32_t> text;
  for (std::string line; text.size() < count && std::getline(in, line);) {
    const std::vector<int32_t> ids = tok.encode(line + "\n", {.parse_special = false});
    text.insert(text.end(), ids.begin(), ids.end());
  }
  return text;
}

// Largest |a - b| over the rows of every position but the last (no token follows it).
float max_row_diff(const std::vector<float>& a, const std::vector<float>& b, size_t positions,
                   size_t vocab) {
  float most = 0;
  for (size_t i = 0; i + 1 < positions; ++i)
    for (size_t v = 0; v < vocab; ++v)
      most = std::max(most, std::abs(a[i * vocab + v] - b[i * vocab + v]));
  return most;
}

class SpeculativePair : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    target_ = model::Model::load(kModels / "steer-olmoe-small").release();
    drafter_ = model::Model::load(kModels / "steer-drafter-small").release();
    tok_ = new tokenizer::Tokenizer(tokenizer::Tokenizer::load(kModels / "steer-olmoe-small"));
  }
  static void TearDownTestSuite() {
    delete target_;
    delete drafter_;
    delete tok_;
  }
  static EngineParams params(const model::Model& m) {
    EngineParams p = test_support::offload_params(m, "exact:evict=lru", 0);
    p.context = 128;
    return p;
  }
  static std::vector<int32_t> greedy(Engine& e, const std::vector<int32_t>& prompt, int n) {
    e.reset();
    std::vector<int32_t> out{argmax(e.prefill(prompt))};
    while (static_cast<int>(out.size()) < n) out.push_back(argmax(e.decode(out.back())));
    return out;
  }
  static model::Model* target_;
  static model::Model* drafter_;
  static tokenizer::Tokenizer* tok_;
};
model::Model* SpeculativePair::target_ = nullptr;
model::Model* SpeculativePair::drafter_ = nullptr;
tokenizer::Tokenizer* SpeculativePair::tok_ = nullptr;

TEST_F(SpeculativePair, GreedyVerificationCommitsTheTargetsGreedyTokens) {
  Engine ar(*target_, params(*target_));
  Engine target(*target_, params(*target_));
  Engine drafter(*drafter_, params(*drafter_));
  const auto ps = prompts(*tok_, 20);
  ASSERT_EQ(ps.size(), 20u);
  for (const int k : {4, 7}) {
    SpeculativeDecoder sd(target, drafter, {.draft_k = k});
    for (size_t i = 0; i < ps.size(); ++i) {
      SCOPED_TRACE("k " + std::to_string(k) + " prompt " + std::to_string(i));
      const std::vector<int32_t> want = greedy(ar, ps[i], 64);
      std::vector<int32_t> got{sd.begin(ps[i])};
      while (got.size() < want.size()) sd.step(got);
      got.resize(want.size());
      ASSERT_EQ(got, want);
    }
    // The drafter is worth its cost: more than one token per verification.
    EXPECT_GT(sd.stats().tau(), 1.5) << "k " << k;
    EXPECT_EQ(sd.stats().reached[0], sd.stats().verifications);
  }
}

// The target with a verification rule (--spec-select) and a pool / union slots of 24 / 24 of
// 64 (the paper's Table 9 setup).
EngineParams block_params(const model::Model& m, const char* rule) {
  schedule::OffloadRequest r{
      .policy = "exact:evict=lru", .cache = 24, .spec_select = rule, .pool = 24, .union_slots = 24};
  r.calibration = std::make_shared<const policy::Calibration>(
      policy::uninformed_calibration(router_spec(m.config())));
  EngineParams p{.offload = resolve_offload(m, r)};
  p.context = 128;
  return p;
}

// Block verification with every position routed exactly commits the target's greedy tokens, as
// plain verification does; block:conf routes within one set per layer and so copies fewer
// experts per committed token (the paper: 3.6-5x fewer than exact verification).
TEST_F(SpeculativePair, BlockVerificationExactIsGreedyAndBlockCopiesLess) {
  Engine ar(*target_, params(*target_));
  Engine drafter(*drafter_, params(*drafter_));
  const auto ps = prompts(*tok_, 6);
  double copies_per_token[2] = {0, 0};
  int row = 0;
  for (const char* rule : {"exact", "block:conf"}) {
    Engine target(*target_, block_params(*target_, rule));
    ASSERT_TRUE(target.verifies_in_blocks());
    SpeculativeDecoder sd(target, drafter, {.draft_k = 6});
    for (size_t i = 0; i < ps.size(); ++i) {
      std::vector<int32_t> got{sd.begin(ps[i])};
      while (got.size() < 48) sd.step(got);
      got.resize(48);
      if (std::string(rule) == "exact") {
        SCOPED_TRACE("prompt " + std::to_string(i));
        ASSERT_EQ(got, greedy(ar, ps[i], 48));
      }
    }
    EXPECT_GT(sd.stats().tau(), 1.5) << rule;
    EXPECT_GT(sd.stats().block_copies, 0) << rule;
    copies_per_token[row++] =
        static_cast<double>(sd.stats().block_copies) / static_cast<double>(sd.stats().committed);
  }
  EXPECT_LT(copies_per_token[1], copies_per_token[0] * 0.8)
      << "block:conf " << copies_per_token[1] << " vs exact " << copies_per_token[0];
}

// Verification blocks on links that move experts: each layer's executed experts are placed in
// the P + U slots and waited for; the committed tokens and every verification's logits are the
// resident run's bit for bit, whatever the link speed, injected delays and copies in flight,
// and the link copies no more than the block's set members outside the pool.
TEST_F(SpeculativePair, BlockVerificationOnALinkIsBitIdenticalToResident) {
  const auto ps = prompts(*tok_, 3);
  Engine drafter(*drafter_, params(*drafter_));
  struct Variant {
    const char* link;
    double delay_s;
    int max_inflight;
    bool early = true;  // the next layer's experts copied early from the pre-gate
  };
  for (const char* rule : {"exact", "block:conf"}) {
    SCOPED_TRACE(rule);
    std::vector<std::vector<int32_t>> want;
    for (const Variant& v : {Variant{"resident", 0, 2}, Variant{"emulated:50,5", 0, 2},
                             Variant{"emulated:5,20", 2e-4, 1},
                             Variant{"emulated:200", 1e-4, 6},
                             Variant{"emulated:20,10", 1e-4, 2, false}}) {
      SCOPED_TRACE(v.link);
      schedule::OffloadRequest r{.policy = "exact:evict=lru",
                                 .cache = 24,
                                 .link = v.link,
                                 .max_inflight = v.max_inflight,
                                 .spec_select = rule,
                                 .pool = 24,
                                 .union_slots = 24,
                                 .draft_k = 6,
                                 .block_prefetch = v.early};
      r.calibration = std::make_shared<const policy::Calibration>(
          policy::uninformed_calibration(router_spec(target_->config())));
      EngineParams p{.offload = resolve_offload(*target_, r)};
      p.context = 128;
      p.test_copy_delay_max_s = v.delay_s;
      Engine target(*target_, p);
      SpeculativeDecoder sd(target, drafter, {.draft_k = 6});
      for (size_t i = 0; i < ps.size(); ++i) {
        std::vector<int32_t> got{sd.begin(ps[i])};
        while (got.size() < 40) sd.step(got);
        if (want.size() < ps.size()) {
          want.push_back(got);
        } else {
          ASSERT_EQ(got, want[i]) << "prompt " << i;
        }
      }
      const CacheStats s = target.cache_stats();
      if (std::string(v.link) == "resident") {
        EXPECT_FALSE(s.physical);
      } else {
        EXPECT_TRUE(s.physical);
        EXPECT_GT(s.block_copied, 0);
        EXPECT_LE(s.block_copied, s.block_copies + s.block_prefetched)
            << "the slots keep at least the pool";
        if (v.early) {
          EXPECT_GT(s.block_prefetched, 0);
          EXPECT_LE(s.block_prefetched, s.block_copied);
        } else {
          EXPECT_EQ(s.block_prefetched, 0);
        }
      }
    }
  }
}

// Exact verification executes every position's own top-K: up to (k + 1) x K experts per layer,
// more than --pool + --union-slots = 16 + 16 here. The link's slots are sized for the drafts
// configured (40 for k = 4), so every block fits and the text is exact routing's, request after
// request; block:conf holds P + U + k (its rescued experts); a decoder drafting more than the
// slots were sized for is refused before it runs.
TEST_F(SpeculativePair, ExactVerificationSlotsAreSizedForTheDrafts) {
  const auto request = [&](const char* rule, int k) {
    schedule::OffloadRequest r{.policy = "exact:evict=lru",
                               .cache = 16,
                               .link = "emulated:50,5",
                               .spec_select = rule,
                               .pool = 16,
                               .union_slots = 16,
                               .draft_k = k};
    r.calibration = std::make_shared<const policy::Calibration>(
        policy::uninformed_calibration(router_spec(target_->config())));
    return resolve_offload(*target_, r);
  };
  EXPECT_EQ(request("exact", 4).physical_slots(), 40);
  EXPECT_EQ(request("exact", 9).physical_slots(), 64);  // at most every expert
  EXPECT_EQ(request("block", 4).physical_slots(), 32);
  EXPECT_EQ(request("block:conf", 4).physical_slots(), 36);
  // P and U outside [top-k, experts] are refused when the options are resolved, named.
  for (const auto& [pool, union_slots, option] :
       {std::tuple{100, 16, "--pool"}, std::tuple{16, 3, "--union-slots"}}) {
    schedule::OffloadRequest r{.policy = "exact:evict=lru",
                               .cache = 16,
                               .link = "emulated:50",
                               .spec_select = "block",
                               .pool = pool,
                               .union_slots = union_slots,
                               .draft_k = 4};
    try {
      resolve_offload(*target_, r);
      ADD_FAILURE() << option << " accepted";
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), ::testing::HasSubstr(std::string(option) + ": value: expected"));
    }
  }
  {
    // The defaults (P = U = C) above half the experts: at most every expert, not 2C (the
    // scheduler refused 96 slots of 64), and an engine runs on them.
    schedule::OffloadRequest r{.policy = "exact:evict=lru",
                               .cache = 48,
                               .link = "emulated:50",
                               .spec_select = "block",
                               .draft_k = 4};
    r.calibration = std::make_shared<const policy::Calibration>(
        policy::uninformed_calibration(router_spec(target_->config())));
    EngineParams p48{.offload = resolve_offload(*target_, r)};
    EXPECT_EQ(p48.offload.physical_slots(), 64);
    p48.context = 64;
    EXPECT_NO_THROW(Engine(*target_, p48));
  }

  Engine ar(*target_, params(*target_));
  Engine drafter(*drafter_, params(*drafter_));
  EngineParams p{.offload = request("exact", 4)};
  p.context = 128;
  Engine target(*target_, p);
  EXPECT_THROW(SpeculativeDecoder(target, drafter, {.draft_k = 5}), Error);
  SpeculativeDecoder sd(target, drafter, {.draft_k = 4});
  for (const auto& prompt : prompts(*tok_, 6)) {
    const std::vector<int32_t> want = greedy(ar, prompt, 48);
    std::vector<int32_t> got{sd.begin(prompt)};
    while (got.size() < want.size()) sd.step(got);
    got.resize(want.size());
    ASSERT_EQ(got, want);
  }
}

// PSR at C = 24 of 64 with the shipped calibration, verification through the policy; with
// `rollback` every layer's logical cache is taken back to the committed positions.
EngineParams psr_params(const model::Model& m, const char* spec_select,
                        const char* link = "resident") {
  schedule::OffloadRequest r{
      .policy = "psr:lambda=0.3,n=1", .cache = 24, .link = link, .spec_select = spec_select};
  r.calibration_source = (kModels / "steer-olmoe-small" / "calib.smcal").string();
  r.calibration = std::make_shared<const policy::Calibration>(trace::read_calibration(r.calibration_source));
  EngineParams p{.offload = resolve_offload(m, r)};
  p.context = 128;
  return p;
}

// `rollback` commits exactly autoregressive PSR's greedy tokens, and its last logits are AR's
// bit for bit; without it the rejected drafts' insertions stay in the logical cache and the
// text drifts from AR PSR's (that is why the mode exists).
TEST_F(SpeculativePair, RollbackCommitsAutoregressivePsrTokens) {
  Engine ar(*target_, psr_params(*target_, ""));
  Engine drafter(*drafter_, params(*drafter_));
  const auto ps = prompts(*tok_, 20);
  int differs_without = 0;
  for (const char* mode : {"rollback", ""}) {
    Engine target(*target_, psr_params(*target_, mode));
    ASSERT_EQ(target.rolls_back_routing(), std::string(mode) == "rollback");
    SpeculativeDecoder sd(target, drafter, {.draft_k = 5});
    for (size_t i = 0; i < ps.size(); ++i) {
      SCOPED_TRACE(std::string("mode '") + mode + "' prompt " + std::to_string(i));
      const std::vector<int32_t> want = greedy(ar, ps[i], 64);
      std::vector<int32_t> got{sd.begin(ps[i])};
      while (got.size() < want.size()) sd.step(got);
      got.resize(want.size());
      if (std::string(mode) == "rollback") {
        ASSERT_EQ(got, want);
      } else {
        differs_without += got != want;
      }
    }
    if (std::string(mode) == "rollback") {
      EXPECT_GT(sd.stats().tau(), 1.5);
      EXPECT_GT(sd.stats().restore_copies, 0) << "rejections evicted committed experts";
    }
  }
  EXPECT_GT(differs_without, 0) << "without rollback the rejected positions change later routing";
}

// On a link that moves experts the slots a rejection took are copied back (physically) before
// their layer runs again: the tokens stay AR PSR's (computed with every expert resident).
TEST_F(SpeculativePair, RollbackOnAnOffloadedLinkCopiesTheRestoredSlots) {
  Engine ar(*target_, psr_params(*target_, ""));
  Engine drafter(*drafter_, params(*drafter_));
  Engine target(*target_, psr_params(*target_, "rollback", "emulated:50,5"));
  SpeculativeDecoder sd(target, drafter, {.draft_k = 5});
  const auto ps = prompts(*tok_, 4);
  for (size_t i = 0; i < ps.size(); ++i) {
    SCOPED_TRACE("prompt " + std::to_string(i));
    const std::vector<int32_t> want = greedy(ar, ps[i], 48);
    std::vector<int32_t> got{sd.begin(ps[i])};
    while (got.size() < want.size()) sd.step(got);
    got.resize(want.size());
    ASSERT_EQ(got, want);
  }
  EXPECT_GT(target.cache_stats().restore_copied, 0);
  EXPECT_LE(target.cache_stats().restore_copied, target.cache_stats().restore_copies);
}

// Teacher forcing (`kl --draft`): the committed tokens are the text's whatever the drafts, the
// logits of every position come back once, and under `rollback` they are plain PSR's (the KL of
// SD rollback is AR PSR's); drafts are accepted only where they equal the text.
TEST_F(SpeculativePair, TeacherForcingCommitsTheTextWithPlainPsrLogitsUnderRollback) {
  std::vector<int32_t> text = heldout_text(*tok_, 96);
  text.resize(96);
  const size_t V = static_cast<size_t>(target_->config().vocab);
  const size_t n = text.size();
  Engine ar(*target_, psr_params(*target_, ""));
  std::vector<float> want(n * V);
  ar.reset();
  ar.prefill(text, want);
  Engine drafter(*drafter_, params(*drafter_));
  Engine target(*target_, psr_params(*target_, "rollback"));
  SpeculativeDecoder sd(target, drafter, {.draft_k = 5});
  std::vector<float> got(n * V, -1.0f);
  const std::span<const float> first =
      sd.begin_forced(std::span<const int32_t>(text.data(), 1), text[1]);
  std::copy(first.begin(), first.end(), got.begin());
  for (size_t pos = 1; pos + 1 < n;) {
    const int committed = sd.step_forced(std::span<const int32_t>(text).subspan(pos + 1),
                                         std::span<float>(got.data() + pos * V, (n - pos) * V));
    ASSERT_GE(committed, 1);
    pos += static_cast<size_t>(committed);
    ASSERT_EQ(target.position(), static_cast<int>(pos)) << "the text's tokens were committed";
  }
  EXPECT_EQ(sd.stats().committed, static_cast<int64_t>(n - 2));
  EXPECT_GT(sd.stats().tau(), 1.0) << "some drafts equal the text";
  EXPECT_LT(sd.stats().accepted[0], sd.stats().reached[0]) << "and some do not";
  // Rows of the last position stay unwritten (no token follows it); the others: prefill's,
  // within the batched-vs-incremental tolerance (the blocks have other batch sizes).
  EXPECT_LE(max_row_diff(got, want, n, V), 1e-4f);
  EXPECT_GT(sd.stats().restore_copies, 0) << "rejected drafts were routed and taken back";
}

// Teacher-forced speculative decoding of `text` (begin_forced + step_forced); returns every
// position's logits (row i predicts text[i + 1]).
std::vector<float> forced_logits(SpeculativeDecoder& sd, const std::vector<int32_t>& text,
                                 size_t vocab) {
  const size_t n = text.size();
  std::vector<float> got(n * vocab, 0.0f);
  const std::span<const float> first =
      sd.begin_forced(std::span<const int32_t>(text.data(), 1), text[1]);
  std::copy(first.begin(), first.end(), got.begin());
  for (size_t pos = 1; pos + 1 < n;)
    pos += static_cast<size_t>(
        sd.step_forced(std::span<const int32_t>(text).subspan(pos + 1),
                       std::span<float>(got.data() + pos * vocab, (n - pos) * vocab)));
  return got;
}

// The section-7 replay: each block is verified a second time with the text's tokens at the draft
// positions, from the same state, and undone. Exact verification routes every position by its
// own router, so wrong drafts change nothing; AcceptMoE's shared set does depend on them; and the
// replay leaves no trace (the same logits and copies as without it).
TEST_F(SpeculativePair, CounterfactualReplayComparesSetsAndLeavesNoTrace) {
  std::vector<int32_t> text = heldout_text(*tok_, 400);
  text.resize(120);
  const size_t V = static_cast<size_t>(target_->config().vocab);
  Engine drafter(*drafter_, params(*drafter_));
  for (const char* rule : {"exact", "block"}) {
    SCOPED_TRACE(rule);
    Engine plain_target(*target_, block_params(*target_, rule));
    SpeculativeDecoder plain(plain_target, drafter, {.draft_k = 5});
    const std::vector<float> want = forced_logits(plain, text, V);
    Engine target(*target_, block_params(*target_, rule));
    SpeculativeDecoder sd(target, drafter, {.draft_k = 5});
    sd.set_counterfactual(true);
    const std::vector<float> got = forced_logits(sd, text, V);
    EXPECT_EQ(got, want) << "the replay changed the verification";
    EXPECT_EQ(target.cache_stats().block_copies, plain_target.cache_stats().block_copies);
    EXPECT_EQ(sd.stats().replay_layers,
              static_cast<int64_t>(text.size() - 2) * target_->config().moe_layer_count());
    EXPECT_EQ(plain.stats().replay_layers, 0);
    if (std::string(rule) == "exact") {
      EXPECT_EQ(sd.stats().replay_differs, 0);
    } else {
      EXPECT_GT(sd.stats().replay_differs, 0) << "rejected drafts shape the shared set";
      EXPECT_LT(sd.stats().replay_differs, sd.stats().replay_layers);
    }
  }
}

// The synthetic drafter (bench --scores-from at shapes that cannot draft): it proposes the text's
// token with the set probability, so the measured acceptance is that probability, all-right drafts
// commit k+1 tokens per verification with the logits of plain decoding, and its drafting cost is
// spent; it cannot generate.
TEST_F(SpeculativePair, SyntheticDrafterHasTheSetAcceptance) {
  std::vector<int32_t> text = heldout_text(*tok_, 700);
  const size_t V = static_cast<size_t>(target_->config().vocab);
  {
    EngineParams p = params(*target_);
    p.context = 512;
    Engine target(*target_, p);
    SpeculativeDecoder sd(target, SyntheticDraft{.acceptance = 0.6, .ms_per_token = 0.05},
                          {.draft_k = 4, .seed = 7});
    text.resize(512);
    forced_logits(sd, text, V);
    const SpecStats& s = sd.stats();
    ASSERT_GT(s.reached[0], 100);
    const double first = static_cast<double>(s.accepted[0]) / static_cast<double>(s.reached[0]);
    EXPECT_NEAR(first, 0.6, 0.1) << s.accepted[0] << " of " << s.reached[0];
    EXPECT_NEAR(static_cast<double>(s.accepted[1]) / static_cast<double>(s.reached[1]), 0.6, 0.12);
    EXPECT_GE(s.draft_s, static_cast<double>(s.drafted) * 0.05e-3) << "the drafting cost is spent";
    EXPECT_THROW(sd.begin(std::span<const int32_t>(text.data(), 4)), Error);
  }
  text.resize(100);
  Engine plain(*target_, params(*target_));
  std::vector<float> want(text.size() * V);
  plain.reset();
  plain.prefill(text, want);
  Engine target(*target_, params(*target_));
  SpeculativeDecoder all_right(target, SyntheticDraft{.acceptance = 1.0}, {.draft_k = 4});
  const std::vector<float> got = forced_logits(all_right, text, V);
  EXPECT_EQ(all_right.stats().accepted, all_right.stats().reached);
  EXPECT_GT(all_right.stats().tau(), 4.5);
  EXPECT_LE(max_row_diff(got, want, text.size(), V), 1e-4f);
  Engine never(*target_, params(*target_));
  SpeculativeDecoder all_wrong(never, SyntheticDraft{.acceptance = 0.0}, {.draft_k = 4});
  forced_logits(all_wrong, text, V);
  EXPECT_EQ(all_wrong.stats().accepted[0], 0);
  EXPECT_DOUBLE_EQ(all_wrong.stats().tau(), 1.0);
}

TEST_F(SpeculativePair, RollbackGivesTheLogitsOfTheShorterHistory) {
  Engine e(*target_, params(*target_));
  const std::vector<int32_t> ids = prompts(*tok_, 1).front();
  // Decode a wrong continuation, roll back, decode the right one: the logits of the history
  // without the wrong tokens.
  e.reset();
  e.prefill(std::span<const int32_t>(ids.data(), 8));
  const std::span<const float> direct = e.decode(ids[8]);
  const std::vector<float> reference(direct.begin(), direct.end());
  e.reset();
  e.prefill(std::span<const int32_t>(ids.data(), 8));
  for (int32_t wrong : {7, 11, 13}) e.decode(wrong);
  e.rollback(8);
  EXPECT_EQ(e.position(), 8);
  const std::span<const float> again = e.decode(ids[8]);
  EXPECT_EQ(std::vector<float>(again.begin(), again.end()), reference);
  EXPECT_THROW(e.rollback(20), Error);
}

TEST_F(SpeculativePair, ADrafterOfAnotherVocabularyIsAClearError) {
  Engine target(*target_, params(*target_));
  const auto other = model::Model::load(fs::path(STEERMOE_ORACLE_DIR) / "olmoe" / "model.gguf");
  Engine drafter(*other, test_support::offload_params(*other, "exact:evict=lru", 0));
  try {
    SpeculativeDecoder sd(target, drafter, {});
    FAIL() << "accepted a drafter of another vocabulary";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), testing::HasSubstr("vocab"));
    EXPECT_THAT(e.what(), testing::HasSubstr("steer-olmoe-small"));
  }
}

TEST(SpeculativeSampling, AcceptanceRuleMatchesItsDefinition) {
  const std::vector<float> p{0.1f, 0.4f, 0.5f, 0.0f};
  const std::vector<float> q{0.2f, 0.2f, 0.5f, 0.1f};
  // p/q = 0.5 for token 0: accepted below u = 0.5 only.
  EXPECT_TRUE(accept_draft(p, q, 0, 0.49));
  EXPECT_FALSE(accept_draft(p, q, 0, 0.51));
  // p >= q: always accepted.
  EXPECT_TRUE(accept_draft(p, q, 1, 0.999));
  EXPECT_TRUE(accept_draft(p, q, 2, 0.999));
  // p = 0: never.
  EXPECT_FALSE(accept_draft(p, q, 3, 0.0));
  // The residual max(0, p - q) = {0, 0.2, 0, 0}: always token 1.
  for (double u : {0.0, 0.3, 0.999}) EXPECT_EQ(sample_residual(p, q, u), 1);
}

// Draft from q, accept with min(1, p/q), else resample the residual: the committed token is
// distributed as p (the target's), whatever q is. A fixed seed; 200k draws; each probability
// within 4 standard errors.
TEST(SpeculativeSampling, CommittedTokensFollowTheTargetDistribution) {
  const std::vector<float> p{0.05f, 0.30f, 0.15f, 0.40f, 0.10f};
  const std::vector<float> q{0.30f, 0.10f, 0.30f, 0.20f, 0.10f};
  std::mt19937_64 rng(20261202);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  std::discrete_distribution<int> draft(q.begin(), q.end());
  constexpr int kDraws = 200000;
  std::vector<int> counts(p.size(), 0);
  for (int i = 0; i < kDraws; ++i) {
    const int d = draft(rng);
    const int token = accept_draft(p, q, d, uniform(rng)) ? d : sample_residual(p, q, uniform(rng));
    ++counts[static_cast<size_t>(token)];
  }
  for (size_t t = 0; t < p.size(); ++t) {
    const double f = static_cast<double>(counts[t]) / kDraws;
    const double se = std::sqrt(p[t] * (1 - p[t]) / kDraws);
    EXPECT_NEAR(f, p[t], 4 * se) << "token " << t;
  }
}

}  // namespace
}  // namespace steermoe::engine
