// Ranking primitives shared by the policies, the calibration and the engine: top-k with the
// spec's tie rules, the model's own (possibly group-limited) selection, execution weights.
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "common/error.hpp"
#include "policy/router.hpp"

namespace steermoe::policy {
namespace {

// True when candidate a ranks before b: higher score, then higher tiebreak, then lower index.
inline bool ranks_before_raw(const float* score, const float* tiebreak, int32_t a, int32_t b) {
  if (score[a] != score[b]) return score[a] > score[b];
  if (tiebreak[a] != tiebreak[b]) return tiebreak[a] > tiebreak[b];
  return a < b;
}

}  // namespace

namespace {

// Reference rule, used for odd sizes and non-finite scores: insertion into a sorted buffer.
void top_k_insertion(const float* s, const float* tb, int n, int k, int32_t* o) {
  auto before = [s, tb](int32_t a, int32_t b) { return ranks_before_raw(s, tb, a, b); };
  int filled = 0;
  for (int32_t i = 0; i < n; ++i) {
    if (filled == k && !before(i, o[k - 1])) continue;
    int pos = filled < k ? filled++ : k - 1;
    while (pos > 0 && before(i, o[pos - 1])) {
      o[pos] = o[pos - 1];
      --pos;
    }
    o[pos] = i;
  }
}

constexpr int kMaxVectorTopK = 1024;

}  // namespace

namespace {

// Copies the scores into `work` (padded with -inf to a multiple of `width`) and reports whether
// all are finite: x - x is 0 for finite x and NaN for inf and NaN.
bool copy_finite(const float* s, int n, int width, float* work) {
  int finite_mask = 0xF;
  int i = 0;
  for (; i + 4 <= n; i += 4) {
    const __m128 v = _mm_loadu_ps(s + i);
    _mm_storeu_ps(work + i, v);
    finite_mask &= _mm_movemask_ps(_mm_cmpeq_ps(_mm_sub_ps(v, v), _mm_setzero_ps()));
  }
  bool finite = finite_mask == 0xF;
  for (; i < n; ++i) {
    work[i] = s[i];
    finite &= (s[i] - s[i]) == 0.0f;
  }
  const int padded = (n + width - 1) / width * width;
  for (int j = n; j < padded; ++j) work[j] = -INFINITY;
  return finite;
}

// Resolves an exact tie on the best score `best` (first found at `chosen`): the higher tiebreak
// wins, then the lower index.
int resolve_tie(const float* work, const float* tb, int n, float best, int chosen) {
  for (int j = chosen + 1; j < n; ++j) {
    if (work[j] == best && tb[j] > tb[chosen]) chosen = j;
  }
  return chosen;
}

// Two-level selection, SSE2 (baseline x86-64), blocks of 4: the maximum of every block is kept in
// `block_max`; each of the k rounds takes the maximum of the block maxima, locates its block and
// lane with equality masks, marks the entry taken (-inf) and refreshes one block maximum.
// Data-dependent branches occur only on exact ties (slow path, spec rule). Insertion sorting is
// dominated by branch mispredictions at these sizes.
void top_k_sse2(const float* s, const float* tb, int n, int k, int32_t* o) {
  alignas(16) float work[kMaxVectorTopK];
  alignas(16) float block_max[kMaxVectorTopK / 4 + 4];
  if (!copy_finite(s, n, 4, work)) {  // -inf marks taken entries: keep the reference path exact
    top_k_insertion(s, tb, n, k, o);
    return;
  }
  const int blocks = (n + 3) / 4;
  const int blocks_padded = (blocks + 3) & ~3;
  auto horizontal_max = [](__m128 v) {
    v = _mm_max_ps(v, _mm_shuffle_ps(v, v, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_max_ps(v, _mm_shuffle_ps(v, v, _MM_SHUFFLE(1, 0, 3, 2)));
  };
  for (int b = 0; b < blocks; ++b) {
    block_max[b] = _mm_cvtss_f32(horizontal_max(_mm_load_ps(work + 4 * b)));
  }
  for (int b = blocks; b < blocks_padded; ++b) block_max[b] = -INFINITY;
  for (int r = 0; r < k; ++r) {
    __m128 m = _mm_load_ps(block_max);
    for (int b = 4; b < blocks_padded; b += 4) m = _mm_max_ps(m, _mm_load_ps(block_max + b));
    m = horizontal_max(m);
    int block = -1;
    bool several_blocks = false;
    for (int b = 0; b < blocks_padded; b += 4) {
      const int mask = _mm_movemask_ps(_mm_cmpeq_ps(_mm_load_ps(block_max + b), m));
      if (mask) {
        several_blocks |= block >= 0 || (mask & (mask - 1)) != 0;
        if (block < 0) block = b + __builtin_ctz(static_cast<unsigned>(mask));
      }
    }
    const int lane_mask = _mm_movemask_ps(_mm_cmpeq_ps(_mm_load_ps(work + 4 * block), m));
    int chosen = 4 * block + __builtin_ctz(static_cast<unsigned>(lane_mask));
    if (several_blocks || (lane_mask & (lane_mask - 1)) != 0) {
      chosen = resolve_tie(work, tb, n, _mm_cvtss_f32(m), chosen);
    }
    o[r] = chosen;
    work[chosen] = -INFINITY;
    const int b = chosen / 4;
    block_max[b] = _mm_cvtss_f32(horizontal_max(_mm_load_ps(work + 4 * b)));
  }
}

__attribute__((target("avx2"))) inline __m256 horizontal_max_avx2(__m256 v) {
  __m128 x = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  x = _mm_max_ps(x, _mm_shuffle_ps(x, x, _MM_SHUFFLE(2, 3, 0, 1)));
  x = _mm_max_ps(x, _mm_shuffle_ps(x, x, _MM_SHUFFLE(1, 0, 3, 2)));
  return _mm256_set_m128(x, x);
}

// The same with AVX2, blocks of 8 (chosen at run time when the CPU has AVX2).
__attribute__((target("avx2"))) void top_k_avx2(const float* s, const float* tb, int n, int k,
                                                int32_t* o) {
  alignas(32) float work[kMaxVectorTopK];
  alignas(32) float block_max[kMaxVectorTopK / 8 + 8];
  if (!copy_finite(s, n, 8, work)) {
    top_k_insertion(s, tb, n, k, o);
    return;
  }
  const int blocks = (n + 7) / 8;
  const int blocks_padded = (blocks + 7) & ~7;
  for (int b = 0; b < blocks; ++b) {
    block_max[b] = _mm256_cvtss_f32(horizontal_max_avx2(_mm256_load_ps(work + 8 * b)));
  }
  for (int b = blocks; b < blocks_padded; ++b) block_max[b] = -INFINITY;
  for (int r = 0; r < k; ++r) {
    __m256 m = _mm256_load_ps(block_max);
    for (int b = 8; b < blocks_padded; b += 8) m = _mm256_max_ps(m, _mm256_load_ps(block_max + b));
    m = horizontal_max_avx2(m);
    int block = -1;
    bool several_blocks = false;
    for (int b = 0; b < blocks_padded; b += 8) {
      const int mask =
          _mm256_movemask_ps(_mm256_cmp_ps(_mm256_load_ps(block_max + b), m, _CMP_EQ_OQ));
      if (mask) {
        several_blocks |= block >= 0 || (mask & (mask - 1)) != 0;
        if (block < 0) block = b + __builtin_ctz(static_cast<unsigned>(mask));
      }
    }
    const int lane_mask =
        _mm256_movemask_ps(_mm256_cmp_ps(_mm256_load_ps(work + 8 * block), m, _CMP_EQ_OQ));
    int chosen = 8 * block + __builtin_ctz(static_cast<unsigned>(lane_mask));
    if (several_blocks || (lane_mask & (lane_mask - 1)) != 0) {
      chosen = resolve_tie(work, tb, n, _mm256_cvtss_f32(m), chosen);
    }
    o[r] = chosen;
    work[chosen] = -INFINITY;
    const int b = chosen / 8;
    block_max[b] = _mm256_cvtss_f32(horizontal_max_avx2(_mm256_load_ps(work + 8 * b)));
  }
}

// AVX-512F, for E <= 256: the whole score row lives in V registers of 16. Each round takes the
// maximum, builds the equality mask of all entries (one 64-bit word per 4 registers), and
// blends the chosen entry to -inf without a data-dependent branch; exact ties take the slow
// path of the spec's rule. About a quarter of the instructions of the two-level AVX2 scan.
// GCC 12's AVX-512 intrinsics start from _mm512_undefined_ps(), which -Wmaybe-uninitialized
// reports as a false positive (GCC bug 105593).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
template <int V>
__attribute__((target("avx512f"))) void top_k_avx512(const float* s, const float* tb, int n, int k,
                                                     int32_t* o) {
  const __m512 neg_inf = _mm512_set1_ps(-INFINITY);
  __m512 x[V];
  bool finite = true;
  for (int v = 0; v < V; ++v) {
    const int left = n - 16 * v;
    const __mmask16 load = left >= 16 ? 0xFFFF
                           : left > 0 ? static_cast<__mmask16>((1u << left) - 1)
                                      : 0;
    x[v] = _mm512_mask_loadu_ps(neg_inf, load, s + 16 * v);
    const __mmask16 ok =
        _mm512_cmp_ps_mask(_mm512_sub_ps(x[v], x[v]), _mm512_setzero_ps(), _CMP_EQ_OQ);
    finite &= (ok & load) == load;
  }
  if (!finite) {  // -inf marks taken entries: keep the reference path exact
    top_k_insertion(s, tb, n, k, o);
    return;
  }
  constexpr int kWords = (V + 3) / 4;
  for (int r = 0; r < k; ++r) {
    __m512 m = x[0];
    for (int v = 1; v < V; ++v) m = _mm512_max_ps(m, x[v]);
    // Butterfly: every lane ends up holding the maximum (no undefined-register intrinsics).
    m = _mm512_max_ps(m, _mm512_shuffle_f32x4(m, m, _MM_SHUFFLE(1, 0, 3, 2)));
    m = _mm512_max_ps(m, _mm512_shuffle_f32x4(m, m, _MM_SHUFFLE(2, 3, 0, 1)));
    m = _mm512_max_ps(m, _mm512_permute_ps(m, _MM_SHUFFLE(1, 0, 3, 2)));
    const __m512 b = _mm512_max_ps(m, _mm512_permute_ps(m, _MM_SHUFFLE(2, 3, 0, 1)));
    uint64_t words[kWords] = {};
    for (int v = 0; v < V; ++v) {
      words[v / 4] |= static_cast<uint64_t>(_mm512_cmp_ps_mask(x[v], b, _CMP_EQ_OQ))
                      << (16 * (v % 4));
    }
    int word = 0;
    while (words[word] == 0) ++word;
    int chosen = 64 * word + __builtin_ctzll(words[word]);
    words[word] &= words[word] - 1;
    for (int w = word; w < kWords; ++w) {
      while (words[w]) {  // another entry with the same score: higher tiebreak wins, then index
        const int idx = 64 * w + __builtin_ctzll(words[w]);
        words[w] &= words[w] - 1;
        if (tb[idx] > tb[chosen]) chosen = idx;
      }
    }
    o[r] = chosen;
    const int chosen_register = chosen >> 4;
    const __mmask16 lane = static_cast<__mmask16>(1u << (chosen & 15));
    for (int v = 0; v < V; ++v) {
      x[v] = _mm512_mask_mov_ps(x[v], v == chosen_register ? lane : __mmask16{0}, neg_inf);
    }
  }
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

const bool kHaveAvx512 = __builtin_cpu_supports("avx512f");
const bool kHaveAvx2 = __builtin_cpu_supports("avx2");

}  // namespace

void top_k_reference(std::span<const float> score, std::span<const float> tiebreak, int k,
                     std::span<int32_t> out) {
  SM_ASSERT(static_cast<size_t>(k) <= score.size() && out.size() >= static_cast<size_t>(k));
  top_k_insertion(score.data(), tiebreak.data(), static_cast<int>(score.size()), k, out.data());
}

void top_k(std::span<const float> score, std::span<const float> tiebreak, int k,
           std::span<int32_t> out, TopKPath path) {
  SM_ASSERT(k >= 0 && static_cast<size_t>(k) <= score.size() &&
            out.size() >= static_cast<size_t>(k));
  SM_ASSERT(tiebreak.size() == score.size());
  if (k == 0) return;
  const int n = static_cast<int>(score.size());
  if (n > kMaxVectorTopK) path = TopKPath::kReference;
  if (path == TopKPath::kAuto) {
    path = kHaveAvx512 && n <= 256 ? TopKPath::kAvx512
           : kHaveAvx2             ? TopKPath::kAvx2
                                   : TopKPath::kSse2;
  }
  if (path == TopKPath::kAvx512 && (!kHaveAvx512 || n > 256)) path = TopKPath::kAvx2;
  if (path == TopKPath::kAvx2 && !kHaveAvx2) path = TopKPath::kSse2;
  switch (path) {
    case TopKPath::kAvx512:
      if (n <= 64) {
        top_k_avx512<4>(score.data(), tiebreak.data(), n, k, out.data());
      } else if (n <= 128) {
        top_k_avx512<8>(score.data(), tiebreak.data(), n, k, out.data());
      } else {
        top_k_avx512<16>(score.data(), tiebreak.data(), n, k, out.data());
      }
      break;
    case TopKPath::kAvx2:
      top_k_avx2(score.data(), tiebreak.data(), n, k, out.data());
      break;
    case TopKPath::kSse2:
      top_k_sse2(score.data(), tiebreak.data(), n, k, out.data());
      break;
    default:
      top_k_insertion(score.data(), tiebreak.data(), n, k, out.data());
      break;
  }
}

void model_top_k(const RouterSpec& spec, std::span<const float> selection,
                 std::span<const float> unbonused, std::span<int32_t> out,
                 std::span<float> group_score, std::span<uint8_t> group_kept,
                 std::span<float> masked) {
  const bool grouped = spec.n_group > 1 && spec.topk_group < spec.n_group;
  if (!grouped) {
    top_k(selection, unbonused, spec.top_k, out);
    return;
  }
  // DeepSeek-V3 group-limited selection: a group scores the sum of its two best selection
  // scores; the best topk_group groups are kept (ties to the lower group); experts of the other
  // groups are masked to 0.0 as transformers does (policy contract: bonus included in the scores).
  const int group_size = spec.experts / spec.n_group;
  for (int g = 0; g < spec.n_group; ++g) {
    float best = -INFINITY, second = -INFINITY;
    for (int i = g * group_size; i < (g + 1) * group_size; ++i) {
      const float v = selection[i];
      if (v > best) {
        second = best;
        best = v;
      } else if (v > second) {
        second = v;
      }
    }
    group_score[g] = group_size >= 2 ? best + second : best;
    group_kept[g] = 0;
  }
  for (int kept = 0; kept < spec.topk_group; ++kept) {
    int best_group = -1;
    for (int g = 0; g < spec.n_group; ++g) {
      if (group_kept[g]) continue;
      if (best_group < 0 || group_score[g] > group_score[best_group]) best_group = g;
    }
    group_kept[best_group] = 1;
  }
  for (int i = 0; i < spec.experts; ++i) {
    masked[i] = group_kept[i / group_size] ? selection[i] : 0.0f;
  }
  top_k(masked.first(spec.experts), unbonused, spec.top_k, out);
}

void execution_weights(const RouterSpec& spec, std::span<const float> weight_scores,
                       std::span<const int32_t> selected, std::span<float> out) {
  const size_t k = selected.size();
  if (spec.mode == ScoreMode::kSoftmax) {
    // Softmax over all E logits in float32, index order, then the entries of S.
    float max_logit = -INFINITY;
    for (float v : weight_scores) max_logit = std::max(max_logit, v);
    float sum = 0.0f;
    for (float v : weight_scores) sum += std::exp(v - max_logit);
    for (size_t i = 0; i < k; ++i) out[i] = std::exp(weight_scores[selected[i]] - max_logit) / sum;
    if (spec.norm_topk_prob) {
      float s = 0.0f;
      for (size_t i = 0; i < k; ++i) s += out[i];
      for (size_t i = 0; i < k; ++i) out[i] /= s;
    }
  } else {
    // Sigmoid scores without the correction bias, normalised over S (+1e-20 as transformers).
    for (size_t i = 0; i < k; ++i) out[i] = weight_scores[selected[i]];
    if (spec.norm_topk_prob) {
      float s = 0.0f;
      for (size_t i = 0; i < k; ++i) s += out[i];
      s += 1e-20f;
      for (size_t i = 0; i < k; ++i) out[i] /= s;
    }
  }
  if (spec.routed_scaling_factor != 1.0f) {
    for (size_t i = 0; i < k; ++i) out[i] *= spec.routed_scaling_factor;
  }
}

}  // namespace steermoe::policy
