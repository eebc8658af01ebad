// The one comparison of the engine's pre-gate scores with a reference, used against the shipped
// models' PyTorch references (tests/engine/tiny_model_test.cpp) and the oracle models' numpy
// recomputation (tests/oracle/test_pregate.cpp). Both lay scores out as RoutingRecord::pregate
// does: [position][MoE layer][expert], where row 0 of every position (the first MoE layer has no
// pre-gate) must be zero.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <numeric>
#include <set>
#include <vector>

namespace steermoe::test_support {

// Experts by score, descending, ties to the lower index (the pre-gate ranking g).
inline std::vector<int> ranking(const float* row, size_t E) {
  std::vector<int> order(E);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return row[a] > row[b]; });
  return order;
}

struct PregateFigures {
  float max_diff = 0.0f;  // largest |engine - reference| over the scores of layers 2..L
  int ranked = 0;         // (position, layer) rows whose first W were compared as sets
};

// Checks (with gtest EXPECTs) `got` against `want` over `positions` x L x E scores: row 0 zero,
// every other score within `tol`, and the set of the first W experts of the ranking equal
// wherever the reference has no near tie (<= 2 tol) at the cut; at least 90% of the rows must be
// ranked. Returns the figures for the test's log line.
inline PregateFigures expect_pregate_matches(const std::vector<float>& got_all,
                                             const std::vector<float>& want, size_t positions,
                                             size_t L, size_t E, size_t W, float tol) {
  PregateFigures f;
  size_t worst = 0, over = 0, row0_nonzero = 0;
  int rank_mismatches = 0;
  size_t first_mismatch = 0;
  for (size_t p = 0; p < positions; ++p) {
    for (size_t l = 0; l < L; ++l) {
      const size_t row = (p * L + l) * E;
      const float* got = &got_all[row];
      const float* exp = &want[row];
      if (l == 0) {  // the first MoE layer has no pre-gate
        row0_nonzero +=
            static_cast<size_t>(std::count_if(got, got + E, [](float v) { return v != 0.0f; }));
        continue;
      }
      for (size_t e = 0; e < E; ++e) {
        const float d = std::fabs(got[e] - exp[e]);
        over += d > tol ? 1 : 0;
        if (d > f.max_diff) {
          f.max_diff = d;
          worst = row + e;
        }
      }
      // The first W of the ranking, where the reference has no near tie at the cut.
      const std::vector<int> want_rank = ranking(exp, E);
      if (exp[want_rank[W - 1]] - exp[want_rank[W]] <= 2 * tol) continue;
      const std::vector<int> got_rank = ranking(got, E);
      const auto w = static_cast<ptrdiff_t>(W);
      if (std::set<int>(got_rank.begin(), got_rank.begin() + w) !=
          std::set<int>(want_rank.begin(), want_rank.begin() + w)) {
        if (rank_mismatches++ == 0) first_mismatch = p * L + l;
      }
      ++f.ranked;
    }
  }
  EXPECT_EQ(row0_nonzero, 0u) << "row 0 (first MoE layer) must be zero";
  EXPECT_LE(f.max_diff, tol) << over << " of " << positions * (L - 1) * E
                             << " scores off; worst at position " << worst / E / L << " layer "
                             << worst / E % L << " expert " << worst % E << ": engine "
                             << got_all[worst] << ", reference " << want[worst];
  EXPECT_EQ(rank_mismatches, 0) << "first W pre-gate experts differ from the reference, first at "
                                << "position " << first_mismatch / L << " layer "
                                << first_mismatch % L;
  EXPECT_GT(f.ranked, static_cast<int>(positions * (L - 1) * 9 / 10));
  return f;
}

}  // namespace steermoe::test_support
