// Block-level selection (speculative decoding's verification) against a plain reference written
// from the paper's Appendix B on random blocks, a hand-worked example of the set size, the top-1
// rescue, the union-slot budget and the pool's recency refill.
#include "policy/block_selection.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>
#include <vector>

#include "common/error.hpp"

namespace steermoe::policy {
namespace {

RouterSpec spec(int layers, int experts, int k) {
  return {.experts = experts, .top_k = k, .layers = layers};
}

// Indices of the k largest values, ties to the lower index.
std::vector<int> top(const std::vector<float>& v, int k, const std::vector<bool>& allowed) {
  std::vector<int> idx;
  for (size_t i = 0; i < v.size(); ++i)
    if (allowed[i]) idx.push_back(static_cast<int>(i));
  std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) { return v[a] > v[b]; });
  idx.resize(static_cast<size_t>(std::min<int>(k, static_cast<int>(idx.size()))));
  return idx;
}

struct Reference {
  std::vector<std::set<int>> selected;  // per position
  int copies = 0;
};

// Appendix B, written plainly: A = root top-K; u_e = sum_d alpha_d r_d,e [e in TopK(z_d)] for e
// outside A; the min(ceil(gamma e^H), m) highest; members outside A and the pool pruned, lowest
// demand first, down to U; each position top-K within the set (+ own top-1 at alpha >= rescue).
Reference reference(const BlockParams& p, int E, int K, const std::vector<std::vector<float>>& z,
                    const std::vector<float>& alpha, const std::vector<bool>& pool) {
  const int n = static_cast<int>(z.size());
  std::vector<std::vector<float>> r(static_cast<size_t>(n));
  std::vector<std::vector<int>> own(static_cast<size_t>(n));
  const std::vector<bool> all(static_cast<size_t>(E), true);
  for (int d = 0; d < n; ++d) {
    float mx = *std::max_element(z[d].begin(), z[d].end()), s = 0;
    for (float v : z[d]) s += std::exp(v - mx);
    for (float v : z[d]) r[d].push_back(std::exp(v - mx) / s);
    own[d] = top(z[d], K, all);
  }
  std::vector<bool> in_set(static_cast<size_t>(E), false);
  for (int e : own[0]) in_set[e] = true;
  std::vector<float> u(static_cast<size_t>(E), 0.0f);
  for (int d = 1; d < n; ++d)
    for (int e : own[d])
      if (!in_set[e]) u[e] += alpha[d] * r[d][e];
  double total = 0;
  int m = 0;
  for (float x : u) total += x, m += x > 0;
  double h = 0;
  for (float x : u)
    if (x > 0) h -= (x / total) * std::log(x / total);
  const int extra = std::min(m, static_cast<int>(std::ceil(p.gamma * std::exp(h))));
  std::vector<bool> positive(static_cast<size_t>(E));
  for (int e = 0; e < E; ++e) positive[e] = u[e] > 0;
  const std::vector<int> chosen = top(u, extra, positive);
  for (int e : chosen) in_set[e] = true;
  int outside = 0;
  for (int e = 0; e < E; ++e) outside += in_set[e] && !pool[e];
  for (int i = extra - 1; i >= 0 && outside > p.union_slots; --i)
    if (!pool[chosen[i]]) in_set[chosen[i]] = false, --outside;
  Reference out;
  std::set<int> all_used;
  for (int d = 0; d < n; ++d) {
    std::set<int> s;
    if (p.rule == BlockRule::kExact) {
      s.insert(own[d].begin(), own[d].end());
    } else {
      int need = K;
      if (p.rule == BlockRule::kBlockConf && alpha[d] >= p.rescue && !in_set[own[d][0]]) {
        s.insert(own[d][0]);
        --need;
      }
      for (int e : top(z[d], need, in_set)) s.insert(e);
    }
    out.selected.push_back(s);
    all_used.insert(s.begin(), s.end());
  }
  for (int e : all_used) out.copies += !pool[e];
  return out;
}

Calibration warm(int layers, int experts, int k) {
  return uninformed_calibration(spec(layers, experts, k));  // warm order = expert index
}

TEST(BlockSelection, MatchesThePlainReferenceOnRandomBlocks) {
  constexpr int E = 16, K = 3, L = 2;
  const RouterSpec s = spec(L, E, K);
  const Calibration calib = warm(L, E, K);
  std::mt19937 rng(7);
  std::normal_distribution<float> noise(0.0f, 1.5f);
  std::uniform_real_distribution<float> unit(0.05f, 1.0f);
  for (const BlockRule rule : {BlockRule::kExact, BlockRule::kBlock, BlockRule::kBlockConf}) {
    const BlockParams p{.rule = rule,
                        .pool = 6,
                        .union_slots = 4,
                        .gamma = rule == BlockRule::kBlockConf ? 1.05f : 1.0f};
    BlockSelector sel(s, p, calib, 9);
    for (int block = 0; block < 60; ++block) {
      const int n = 1 + block % 9;
      std::vector<std::vector<float>> z(static_cast<size_t>(n), std::vector<float>(E));
      std::vector<float> flat, alpha{1.0f};
      for (auto& row : z)
        for (float& v : row) v = noise(rng);
      for (const auto& row : z) flat.insert(flat.end(), row.begin(), row.end());
      for (int d = 1; d < n; ++d) alpha.push_back(alpha.back() * unit(rng));
      for (int l = 0; l < L; ++l) {
        std::vector<bool> pool(E);
        for (int e = 0; e < E; ++e) pool[e] = sel.in_pool(l, e);
        const Reference want = reference(p, E, K, z, alpha, pool);
        const auto got = sel.select(l, n, flat, {}, alpha);
        SCOPED_TRACE("rule " + std::string(block_rule_name(rule)) + " block " +
                     std::to_string(block) + " layer " + std::to_string(l));
        ASSERT_EQ(got.size(), static_cast<size_t>(n));
        for (int d = 0; d < n; ++d) {
          const std::set<int> g(got[d].selected.begin(), got[d].selected.end());
          EXPECT_EQ(g, want.selected[d]) << "position " << d;
          EXPECT_TRUE(std::is_sorted(got[d].selected.begin(), got[d].selected.end()));
          float sum = 0;
          for (float w : got[d].weights) sum += w;
          EXPECT_GT(sum, 0.0f);
        }
        EXPECT_EQ(sel.last_copies(), want.copies);
        // The root position is always committed: it routes exactly.
        EXPECT_EQ(got[0].replaced, 0);
      }
    }
  }
}

// E = 8, K = 2, n = 3: the root takes {0, 1}; positions 1 and 2 want {2, 3} and {3, 4}. Demand:
// u_2 = a1 r1(2), u_3 = a1 r1(3) + a2 r2(3), u_4 = a2 r2(4); its entropy sets how many join.
TEST(BlockSelection, SetSizeFollowsTheEntropyOfTheDemand) {
  constexpr int E = 8, K = 2;
  const RouterSpec s = spec(1, E, K);
  const Calibration calib = warm(1, E, K);
  std::vector<float> z(3 * E, -5.0f);
  z[0] = 3, z[1] = 2;                  // root
  z[E + 2] = 2, z[E + 3] = 2;          // position 1
  z[2 * E + 3] = 2, z[2 * E + 4] = 2;  // position 2
  // Equal weights: u_3 = 2 u_2 = 2 u_4, q = (1/4, 1/2, 1/4), H = 1.04 nats, e^H = 2.83 -> 3.
  BlockSelector all(s, {.rule = BlockRule::kBlock, .pool = 2, .union_slots = E}, calib, 3);
  const std::vector<float> equal{1.0f, 1.0f, 1.0f};
  all.select(0, 3, z, {}, equal);
  EXPECT_EQ(all.last_set_size(), K + 3);
  // Position 2 never committed (weight 0): only 2 and 3 have demand, q = (1/2, 1/2), e^H = 2;
  // position 2 routes within {0, 1, 2, 3}: 3, then the lowest-id tie at -5, expert 0.
  BlockSelector faded(s, {.rule = BlockRule::kBlock, .pool = 2, .union_slots = E}, calib, 3);
  const std::vector<float> weights{1.0f, 1.0f, 0.0f};
  const auto d = faded.select(0, 3, z, {}, weights);
  EXPECT_EQ(faded.last_set_size(), K + 2);
  EXPECT_EQ(d[1].selected, (std::vector<int32_t>{2, 3}));
  EXPECT_EQ(d[2].selected, (std::vector<int32_t>{0, 3}));  // 4 is out of the set
  EXPECT_EQ(d[2].replaced, 1);
}

TEST(BlockSelection, UnionSlotsBoundTheCopiesAndTheRescueKeepsTopOne) {
  constexpr int E = 8, K = 2;
  const RouterSpec s = spec(1, E, K);
  const Calibration calib = warm(1, E, K);  // pool {0, 1}
  std::vector<float> z(3 * E, -5.0f);
  z[0] = 3, z[1] = 2;
  z[E + 5] = 3, z[E + 6] = 2;
  z[2 * E + 7] = 3, z[2 * E + 6] = 2;
  // Demand outside A: u5 = 0.9 r1(5) = 0.658, u6 = 0.9 r1(6) + 0.5 r2(6) = 0.377,
  // u7 = 0.5 r2(7) = 0.366; e^H = 2.88, so all three join, and U = 2 prunes the lowest (7).
  BlockSelector tight(s, {.rule = BlockRule::kBlock, .pool = 2, .union_slots = K}, calib, 3);
  const std::vector<float> alpha{1.0f, 0.9f, 0.5f};
  const auto d = tight.select(0, 3, z, {}, alpha);
  EXPECT_EQ(tight.last_set_size(), K + 2);
  EXPECT_EQ(tight.last_copies(), 2);  // 5 and 6; the root's {0, 1} were in the pool
  EXPECT_EQ(d[0].selected, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(d[1].selected, (std::vector<int32_t>{5, 6}));
  EXPECT_EQ(d[2].selected, (std::vector<int32_t>{0, 6}));  // its top-1 (7) was pruned
  // block:conf: the same set, but position 2 (alpha 0.5 >= 0.3) keeps its own top-1 (7).
  BlockSelector conf(
      s, {.rule = BlockRule::kBlockConf, .pool = 2, .union_slots = K, .gamma = 1.05f}, calib, 3);
  const auto c = conf.select(0, 3, z, {}, alpha);
  EXPECT_EQ(c[1].selected, (std::vector<int32_t>{5, 6}));
  EXPECT_EQ(c[2].selected, (std::vector<int32_t>{6, 7}));
  EXPECT_EQ(conf.last_copies(), 3);
  // The pool keeps the most recently used, ties to the lower id: all five ran in this block,
  // P = 2 of them stay: {0, 1}.
  EXPECT_TRUE(conf.in_pool(0, 0));
  EXPECT_TRUE(conf.in_pool(0, 1));
  EXPECT_FALSE(conf.in_pool(0, 5));
  // The next block sees 5 and 7 as copies again.
  EXPECT_THROW(BlockSelector(s, {.rule = BlockRule::kBlock, .pool = 1, .union_slots = K}, calib, 3),
               Error);
  EXPECT_THROW(parse_block_rule("blocky"), Error);
}

}  // namespace
}  // namespace steermoe::policy
