// Properties of docs/policy-contract.md "What the tests must cover" on long random traces:
// invariants of every policy, equivalence of cacheprior with a naive implementation of Skliar et
// al.'s rule, and determinism.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "policy/router.hpp"

namespace steermoe::policy {
namespace {

// A random trace with some temporal locality and cross-layer predictability, so that caches and
// prefetches actually hit and miss.
struct RandomTrace {
  int steps, layers, experts;
  std::vector<int32_t> tokens;
  std::vector<float> z, pregate;  // [T][L][E]
  const float* z_at(int t, int l) const {
    return &z[(static_cast<size_t>(t) * layers + l) * experts];
  }
  const float* g_at(int t, int l) const {
    return &pregate[(static_cast<size_t>(t) * layers + l) * experts];
  }
};

RandomTrace make_trace(int steps, int layers, int experts, uint32_t seed, bool sigmoid = false) {
  RandomTrace tr{steps, layers, experts, {}, {}, {}};
  std::mt19937 rng(seed);
  std::normal_distribution<float> noise(0.0f, 1.0f);
  std::uniform_int_distribution<int> token(0, 19);
  std::vector<float> pref(static_cast<size_t>(layers) * experts);
  for (auto& p : pref) p = noise(rng);
  tr.z.resize(static_cast<size_t>(steps) * layers * experts);
  tr.pregate.resize(tr.z.size());
  for (int t = 0; t < steps; ++t) {
    tr.tokens.push_back(token(rng));
    for (int l = 0; l < layers; ++l) {
      for (int e = 0; e < experts; ++e) {
        float& pv = pref[static_cast<size_t>(l) * experts + e];
        pv = 0.8f * pv + 0.6f * noise(rng);  // drifting preference: temporal locality
        float v =
            pv + 0.3f * static_cast<float>((tr.tokens.back() * 7 + e) % 5) + 0.5f * noise(rng);
        // Quantise a little so that exact ties occur and tie rules are exercised.
        v = std::round(v * 8.0f) / 8.0f;
        if (sigmoid) v = 1.0f / (1.0f + std::exp(-v)) + 0.01f * static_cast<float>(e % 3);
        const size_t i = (static_cast<size_t>(t) * layers + l) * experts + e;
        tr.z[i] = v;
        tr.pregate[i] = v + 0.4f * noise(rng);
      }
    }
  }
  return tr;
}

Calibration calibrate(const RouterSpec& spec, const RandomTrace& tr) {
  Calibrator c(spec, 20);
  for (int t = 0; t < tr.steps; ++t) {
    for (int l = 0; l < tr.layers; ++l) {
      c.add(l, tr.tokens[t], std::span<const float>(tr.z_at(t, l), tr.experts));
    }
    c.end_step();
  }
  return c.finish();
}

std::vector<int32_t> naive_exact(const RouterSpec& spec, const float* z) {
  std::vector<int32_t> idx(spec.experts);
  for (int i = 0; i < spec.experts; ++i) idx[i] = i;
  std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) { return z[a] > z[b]; });
  idx.resize(spec.top_k);
  std::sort(idx.begin(), idx.end());
  return idx;
}

// Runs a policy over the trace, checking the invariants at every step. Returns the decisions
// flattened (S, copies, evictions) for determinism comparisons.
std::vector<int32_t> run_checked(const RouterSpec& spec, const Calibration& calib,
                                 const std::string& policy, int cache, const RandomTrace& tr,
                                 bool expect_exact) {
  const PolicyConfig config = parse_policy(policy);
  RequestRouter r(spec, config, calib, cache);
  const int w = config.effective_window(spec);
  std::vector<int32_t> flat;
  // Mirror of the physical slots, updated only from emitted copies.
  std::vector<std::vector<int>> physical(spec.layers);
  for (int l = 0; l < spec.layers; ++l) {
    for (int s = 0; s < cache; ++s) physical[l].push_back(r.cache(l).expert_in_slot(s));
  }
  for (int t = 0; t < tr.steps; ++t) {
    r.begin_token(tr.tokens[t]);
    for (int l = 0; l < spec.layers; ++l) {
      std::span<const float> z(tr.z_at(t, l), spec.experts);
      const Decision& d = r.select(l, z);
      const LayerCache& c = r.cache(l);
      EXPECT_LE(c.size(), cache);
      for (int e : d.selected) {
        EXPECT_TRUE(c.resident(e)) << "S must be resident after part 2";
      }
      EXPECT_EQ(d.selected.size(), static_cast<size_t>(spec.top_k));
      EXPECT_EQ(d.exact, naive_exact(spec, z.data()));
      if (expect_exact) {
        EXPECT_EQ(d.selected, d.exact) << policy;
      }
      EXPECT_LE(d.prefetch.size(), static_cast<size_t>(config.prefetch_budget));
      for (const Copy& cp : d.prefetch) physical[l][cp.slot] = cp.expert;
      for (const Copy& cp : d.demand) physical[l][cp.slot] = cp.expert;
      for (int s = 0; s < cache; ++s) EXPECT_EQ(physical[l][s], c.expert_in_slot(s));
      for (int i = 0; i < spec.top_k; ++i) EXPECT_EQ(d.selected_slot[i], c.slot_of(d.selected[i]));
      flat.insert(flat.end(), d.selected.begin(), d.selected.end());
      for (const Copy& cp : d.prefetch) flat.insert(flat.end(), {-1, cp.expert, cp.slot});
      for (const Copy& cp : d.demand) flat.insert(flat.end(), {-2, cp.expert, cp.slot});
      flat.insert(flat.end(), d.evicted.begin(), d.evicted.end());

      if (l + 1 < spec.layers) {
        // Part 1 for layer l+1: check that no protected expert is evicted.
        std::span<const float> g(tr.g_at(t, l + 1), spec.experts);
        std::vector<int32_t> ranking(w);
        top_k(g, g, w, ranking);
        std::set<int> before;
        for (int s = 0; s < cache; ++s) before.insert(r.cache(l + 1).expert_in_slot(s));
        auto pf = r.prefetch(l + 1, g);
        const Decision& next = r.decision(l + 1);
        EXPECT_LE(pf.size(), static_cast<size_t>(config.prefetch_budget));
        std::set<int> protected_set;
        if (config.gate == PrefetchGate::kBonus && config.range == RangeMode::kFixed) {
          // The candidates are the predicted selection: the top-K of g plus the bonus on the
          // residents (ties: g, then the lower index), whose residents are all protected first.
          const float bonus = config.lambda * calib.score_range[l + 1];
          std::vector<float> biased(spec.experts);
          for (int e = 0; e < spec.experts; ++e)
            biased[e] = g[e] + (before.count(e) ? bonus : 0.0f);
          std::vector<int32_t> idx(spec.experts);
          for (int e = 0; e < spec.experts; ++e) idx[e] = e;
          std::sort(idx.begin(), idx.end(), [&](int a, int b) {
            if (biased[a] != biased[b]) return biased[a] > biased[b];
            if (g[a] != g[b]) return g[a] > g[b];
            return a < b;
          });
          ranking.assign(idx.begin(), idx.begin() + spec.top_k);
          for (int e : ranking)
            if (before.count(e)) protected_set.insert(e);
        }
        size_t inserted = 0;
        for (int e : ranking) {
          if (inserted < pf.size() && pf[inserted].expert == e) {
            // This insertion evicted next.evicted[inserted] (the cache is always full).
            EXPECT_EQ(protected_set.count(next.evicted[inserted]), 0u) << "evicted a member of B";
            protected_set.insert(e);
            before.erase(next.evicted[inserted]);
            before.insert(e);
            ++inserted;
          } else if (before.count(e)) {
            protected_set.insert(e);
          }
        }
        EXPECT_EQ(inserted, pf.size());
      }
    }
  }
  return flat;
}

TEST(Invariants, HoldForEveryPolicyOnRandomTraces) {
  RouterSpec spec{.experts = 16, .top_k = 4, .layers = 3};
  const RandomTrace held_out = make_trace(200, 3, 16, 7);
  const Calibration calib = calibrate(spec, held_out);
  const RandomTrace tr = make_trace(300, 3, 16, 11);
  struct Case {
    const char* policy;
    bool exact;
  };
  for (const Case& c :
       {Case{"exact:evict=lru", true}, Case{"exact:evict=a", true},
        Case{"exact:evict=a,n=2,w=6", true}, Case{"cacheprior:lambda=0", true},
        Case{"psr:lambda=0,n=0", true}, Case{"psr:lambda=0,n=0,evict=lru", true},
        Case{"cacheprior:lambda=0.2", false},
        Case{"cacheprior:lambda=0.3,j=2,range=running", false}, Case{"psr:lambda=0.3,n=1", false},
        Case{"psr:lambda=0.3,n=8", false}, Case{"psr:lambda=0.5,n=2,w=4,evict=lru", false},
        Case{"spec:n=1,w=6", false}, Case{"psr:lambda=0,n=2,gate=bonus", true},
        Case{"psr:lambda=0.3,n=2,gate=bonus", false},
        Case{"cacheprior:lambda=0.2,n=1,j=2,range=running,gate=bonus", false}}) {
    for (int cache : {4, 6, 8, 16}) {
      SCOPED_TRACE(std::string(c.policy) + " C=" + std::to_string(cache));
      run_checked(spec, calib, c.policy, cache, tr, c.exact);
    }
  }
}

TEST(Invariants, GroupLimitedSigmoidRouterWithBonus) {
  RouterSpec spec{.experts = 16,
                  .top_k = 4,
                  .layers = 2,
                  .mode = ScoreMode::kSigmoid,
                  .n_group = 4,
                  .topk_group = 2,
                  .norm_topk_prob = true,
                  .routed_scaling_factor = 2.5f,
                  .default_window = 4};
  const RandomTrace tr = make_trace(200, 2, 16, 3, /*sigmoid=*/true);
  const Calibration calib = calibrate(spec, tr);
  for (const char* policy : {"psr:lambda=0.3,n=1", "cacheprior:lambda=0.2"}) {
    PolicyConfig config = parse_policy(policy);
    RequestRouter r(spec, config, calib, 8);
    for (int t = 0; t < tr.steps; ++t) {
      r.begin_token(tr.tokens[t]);
      for (int l = 0; l < 2; ++l) {
        const Decision& d = r.select(l, std::span<const float>(tr.z_at(t, l), 16));
        for (int e : d.selected) EXPECT_TRUE(r.cache(l).resident(e));
        if (l == 0) r.prefetch(1, std::span<const float>(tr.g_at(t, 1), 16));
      }
    }
  }
}

// Skliar et al.'s Cache-Prior, written independently and naively: bonus on the resident set,
// no prefetch, LRU eviction of the least recently used expert not selected.
struct NaiveCachePrior {
  int k, cache;
  float lambda;
  bool running;
  int j;
  std::set<int> resident;
  std::map<int, int64_t> last_use;
  float range_sum = 0;
  int64_t range_n = 0;

  std::vector<int32_t> step(const float* z, int experts, float fixed_range, int64_t t,
                            std::vector<int32_t>& evicted) {
    float range = fixed_range;
    if (running) {
      float lo = *std::min_element(z, z + experts), hi = *std::max_element(z, z + experts);
      range_sum += hi - lo;
      range_n += 1;
      range = range_sum / static_cast<float>(range_n);
    }
    std::vector<int> by_z(experts);
    for (int i = 0; i < experts; ++i) by_z[i] = i;
    std::stable_sort(by_z.begin(), by_z.end(), [&](int a, int b) { return z[a] > z[b]; });
    std::set<int> top_j(by_z.begin(), by_z.begin() + j);
    const float bonus = lambda * range;
    std::vector<float> biased(z, z + experts);
    for (int e = 0; e < experts; ++e) {
      if (resident.count(e) || top_j.count(e)) biased[e] = z[e] + bonus;
    }
    std::vector<int> order(experts);
    for (int i = 0; i < experts; ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
      if (biased[a] != biased[b]) return biased[a] > biased[b];
      return z[a] > z[b];
    });
    std::vector<int32_t> s(order.begin(), order.begin() + k);
    std::sort(s.begin(), s.end());
    for (int e : s) {
      if (resident.count(e)) continue;
      if (static_cast<int>(resident.size()) == cache) {
        int victim = -1;
        for (int r : resident) {  // ascending: ties go to the lower index
          if (std::find(s.begin(), s.end(), r) != s.end()) continue;
          if (victim < 0 || last_use[r] < last_use[victim]) victim = r;
        }
        resident.erase(victim);
        evicted.push_back(victim);
      }
      resident.insert(e);
    }
    for (int e : s) last_use[e] = t;
    return s;
  }
};

TEST(Equivalence, CachePriorMatchesNaiveSkliarRule) {
  RouterSpec spec{.experts = 32, .top_k = 4, .layers = 2};
  const RandomTrace held_out = make_trace(100, 2, 32, 5);
  const Calibration calib = calibrate(spec, held_out);
  const RandomTrace tr = make_trace(2000, 2, 32, 99);
  struct Case {
    const char* policy;
    float lambda;
    bool running;
    int j;
  };
  for (const Case& c : {Case{"cacheprior:lambda=0.2,evict=lru", 0.2f, false, 0},
                        Case{"cacheprior:lambda=0.5,evict=lru", 0.5f, false, 0},
                        Case{"cacheprior:lambda=0.2,evict=lru,j=2,range=running", 0.2f, true, 2}}) {
    for (int cache : {4, 8, 16}) {
      SCOPED_TRACE(std::string(c.policy) + " C=" + std::to_string(cache));
      RequestRouter r(spec, parse_policy(c.policy), calib, cache);
      std::vector<NaiveCachePrior> naive;
      for (int l = 0; l < 2; ++l) {
        NaiveCachePrior n{4, cache, c.lambda, c.running, c.j, {}, {}};
        for (int i = 0; i < cache; ++i) {
          n.resident.insert(calib.expert_order[l][i]);
        }
        for (int e = 0; e < 32; ++e) n.last_use[e] = 0;
        naive.push_back(n);
      }
      int mismatches = 0;
      for (int t = 0; t < tr.steps && mismatches == 0; ++t) {
        r.begin_token(tr.tokens[t]);
        for (int l = 0; l < 2; ++l) {
          std::vector<int32_t> naive_evicted;
          auto s = naive[l].step(tr.z_at(t, l), 32, calib.score_range[l], t + 1, naive_evicted);
          const Decision& d = r.select(l, std::span<const float>(tr.z_at(t, l), 32));
          if (d.selected != s || d.evicted != naive_evicted) ++mismatches;
          EXPECT_EQ(d.selected, s) << "step " << t << " layer " << l;
          EXPECT_EQ(d.evicted, naive_evicted) << "step " << t << " layer " << l;
          // The engine and the tools call part 1 for every policy; with n = 0 it must neither
          // insert nor protect anything (B stays empty), or victims would differ.
          if (l + 1 < 2) {
            EXPECT_TRUE(r.prefetch(l + 1, std::span<const float>(tr.g_at(t, l + 1), 32)).empty());
          }
        }
      }
    }
  }
}

TEST(Determinism, SameInputsGiveBitIdenticalDecisions) {
  RouterSpec spec{.experts = 16, .top_k = 4, .layers = 3};
  const RandomTrace tr = make_trace(300, 3, 16, 21);
  const Calibration calib = calibrate(spec, make_trace(100, 3, 16, 22));
  for (const char* policy : {"psr:lambda=0.3,n=1", "cacheprior:lambda=0.3,j=2,range=running",
                             "exact:evict=a,n=2", "spec:n=1"}) {
    auto a = run_checked(spec, calib, policy, 8, tr, false);
    auto b = run_checked(spec, calib, policy, 8, tr, false);
    EXPECT_EQ(a, b) << policy;
    EXPECT_FALSE(a.empty());
  }
}

}  // namespace
}  // namespace steermoe::policy
