// The K-quants' scale searches (fits.hpp): one search each, with two ways of summing a
// candidate's rounding: the scalar reference and SSE2.
//
// Each candidate takes one pass: the rounded q give the sums sq, sqq, sqx, from which the least
// squares fit and its squared error follow in closed form (with the x-only sums sx, sxx), so a
// candidate costs one multiply-round-accumulate per element. sqx is summed in four fixed chains
// (element i in chain i % 4): deterministic, not one long dependency chain, and exactly the
// four lanes of an SSE register, so the SSE2 sums repeat the reference's float operations in
// its order (sq and sqq are small integers, exact in float lanes).
#include "quant/fits.hpp"

#include <algorithm>
#include <cmath>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace steermoe::quant {
namespace {

// One candidate's rounding, summed.
struct CandidateSums {
  int sq = 0;
  int sqq = 0;
  float sqx_part[4] = {0, 0, 0, 0};
  double sqx() const {
    return static_cast<double>(sqx_part[0] + sqx_part[1]) + (sqx_part[2] + sqx_part[3]);
  }
};

// q_i = min(round(iscale y_i), nmax) with y_i = x_i - min >= 0, halves up (lround for v >= 0).
CandidateSums affine_sums_scalar(const float* x, const float* y, int n, int nmax, float iscale) {
  CandidateSums c;
  for (int i = 0; i < n; ++i) {
    const int q = std::min(static_cast<int>(iscale * y[i] + 0.5f), nmax);
    c.sq += q;
    c.sqq += q * q;
    c.sqx_part[i % 4] += static_cast<float>(q) * x[i];
  }
  return c;
}

// q_i = clamp(round(iscale x_i), -nmax, nmax - 1), halves away from zero (lround).
CandidateSums symmetric_sums_scalar(const float* x, int n, int nmax, float iscale) {
  CandidateSums c;
  for (int i = 0; i < n; ++i) {
    const float v = iscale * x[i];
    const int q = std::clamp(static_cast<int>(v + std::copysign(0.5f, v)), -nmax, nmax - 1);
    c.sqq += q * q;
    c.sqx_part[i % 4] += static_cast<float>(q) * x[i];
  }
  return c;
}

#if defined(__SSE2__)

// Lanes l of q and x hold elements l, l + 4, ...: a lane adds in the order of chain l.
void add_lanes(CandidateSums& c, __m128 sq, __m128 sqq, __m128 sqx) {
  alignas(16) float a[4], b[4];
  _mm_store_ps(a, sq);
  _mm_store_ps(b, sqq);
  _mm_storeu_ps(c.sqx_part, sqx);  // a member of CandidateSums: not 16-byte aligned
  c.sq = static_cast<int>(a[0] + a[1] + a[2] + a[3]);  // integers below 2^24: exact
  c.sqq = static_cast<int>(b[0] + b[1] + b[2] + b[3]);
}

CandidateSums affine_sums_sse2(const float* x, const float* y, int n, int nmax, float iscale) {
  const __m128 vscale = _mm_set1_ps(iscale), half = _mm_set1_ps(0.5f);
  const __m128 top = _mm_set1_ps(static_cast<float>(nmax));
  __m128 sq = _mm_setzero_ps(), sqq = _mm_setzero_ps(), sqx = _mm_setzero_ps();
  for (int i = 0; i < n; i += 4) {
    const __m128 v = _mm_add_ps(_mm_mul_ps(vscale, _mm_loadu_ps(y + i)), half);
    // Truncation (cvtt) of v >= 0 as static_cast<int>; min in float is exact on integers.
    const __m128 q = _mm_min_ps(_mm_cvtepi32_ps(_mm_cvttps_epi32(v)), top);
    sq = _mm_add_ps(sq, q);
    sqq = _mm_add_ps(sqq, _mm_mul_ps(q, q));
    sqx = _mm_add_ps(sqx, _mm_mul_ps(q, _mm_loadu_ps(x + i)));
  }
  CandidateSums c;
  add_lanes(c, sq, sqq, sqx);
  return c;
}

CandidateSums symmetric_sums_sse2(const float* x, int n, int nmax, float iscale) {
  const __m128 vscale = _mm_set1_ps(iscale), half = _mm_set1_ps(0.5f);
  const __m128 sign = _mm_set1_ps(-0.0f);
  const __m128 bottom = _mm_set1_ps(static_cast<float>(-nmax));
  const __m128 top = _mm_set1_ps(static_cast<float>(nmax - 1));
  __m128 sqq = _mm_setzero_ps(), sqx = _mm_setzero_ps();
  for (int i = 0; i < n; i += 4) {
    const __m128 xv = _mm_loadu_ps(x + i);
    const __m128 v = _mm_mul_ps(vscale, xv);
    const __m128 r = _mm_add_ps(v, _mm_or_ps(_mm_and_ps(v, sign), half));  // v + copysign(.5, v)
    const __m128 q = _mm_min_ps(_mm_max_ps(_mm_cvtepi32_ps(_mm_cvttps_epi32(r)), bottom), top);
    sqq = _mm_add_ps(sqq, _mm_mul_ps(q, q));
    sqx = _mm_add_ps(sqx, _mm_mul_ps(q, xv));
  }
  CandidateSums c;
  add_lanes(c, _mm_setzero_ps(), sqq, sqx);
  return c;
}
#else
CandidateSums affine_sums_sse2(const float* x, const float* y, int n, int nmax, float iscale) {
  return affine_sums_scalar(x, y, n, nmax, iscale);
}
CandidateSums symmetric_sums_sse2(const float* x, int n, int nmax, float iscale) {
  return symmetric_sums_scalar(x, n, nmax, iscale);
}
#endif

// The values a search fits: x itself, or a copy with each NaN or infinity as 0 (that value's own
// q comes from the caller's final rounding, which handles it), so that every candidate's
// rounding is of finite values and defined.
const float* finite_values(const float* x, int n, float* copy) {
  bool finite = true;
  for (int i = 0; i < n; ++i) finite &= std::isfinite(x[i]);
  if (finite) return x;
  for (int i = 0; i < n; ++i) copy[i] = std::isfinite(x[i]) ? x[i] : 0.0f;
  return copy;
}

template <bool kLanes>
void fit_scale_min_with(const float* values, int n, int nmax, float* s_out, float* m_out) {
  float copy[32];
  const float* x = finite_values(values, n, copy);
  float min = x[0], max = x[0];
  for (int i = 1; i < n; ++i) {
    min = std::min(min, x[i]);
    max = std::max(max, x[i]);
  }
  if (min > 0.0f) min = 0.0f;
  if (!(max > min)) {  // constant block: all q = 0, w = -m
    *s_out = 0.0f;
    *m_out = -min;
    return;
  }
  if (!std::isfinite(max - min)) {  // a range beyond float: the range-based scale, no search
    *s_out = max / static_cast<float>(nmax) - min / static_cast<float>(nmax);
    *m_out = -min;
    return;
  }
  const bool lanes = kLanes && n % 4 == 0;
  float y[32];  // x - min >= 0
  double sx = 0, sxx = 0;
  for (int i = 0; i < n; ++i) {
    y[i] = x[i] - min;
    sx += x[i];
    sxx += static_cast<double>(x[i]) * x[i];
  }
  float best_err = INFINITY, best_s = (max - min) / static_cast<float>(nmax), best_m = -min;
  for (int k = -10; k <= 10; ++k) {
    const float iscale = (static_cast<float>(nmax) + 0.1f * static_cast<float>(k)) / (max - min);
    if (!std::isfinite(iscale)) continue;  // a subnormal range
    const CandidateSums c =
        lanes ? affine_sums_sse2(x, y, n, nmax, iscale) : affine_sums_scalar(x, y, n, nmax, iscale);
    const int sq = c.sq, sqq = c.sqq;
    const double sqx = c.sqx();
    const double det = static_cast<double>(n) * sqq - static_cast<double>(sq) * sq;
    double s, o;
    if (det > 0) {
      // One division per candidate, not two: a double division is the longest-latency
      // operation here (the fits were most of quantize's time, perf).
      const double inv_det = 1.0 / det;
      s = (n * sqx - sq * sx) * inv_det;
      o = (sqq * sx - sq * sqx) * inv_det;
    } else {
      s = 1.0 / iscale;
      o = min;
    }
    if (o > 0) {  // m must be >= 0: refit the scale alone with o = 0
      o = 0;
      s = sqq > 0 ? sqx / sqq : 0;
    }
    if (s < 0) continue;
    // sum (s q + o - x)^2 expanded over the sums.
    const double err = s * s * sqq + 2 * s * o * sq + n * o * o - 2 * s * sqx - 2 * o * sx + sxx;
    if (err < best_err) {
      best_err = static_cast<float>(err);
      best_s = static_cast<float>(s);
      best_m = static_cast<float>(-o);
    }
  }
  *s_out = best_s;
  *m_out = best_m;
}

template <bool kLanes>
float fit_symmetric_with(const float* values, int n, int nmax) {
  float copy[16];
  const float* x = finite_values(values, n, copy);
  float amax = 0.0f, max = 0.0f;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  }
  if (!(amax > 0.0f)) return 0.0f;
  const bool lanes = kLanes && n % 4 == 0;
  // At the least-squares s = sqx / sqq the error is sxx - sqx^2 / sqq: the best candidate has
  // the largest sqx^2 / sqq, found by cross-multiplying (no division per candidate: a double
  // division per candidate was the largest cost of quantizing Q3_K / Q6_K, perf).
  double best_sqx = 0.0;
  int best_sqq = 0;
  for (int k = -9; k <= 9; ++k) {
    const float iscale = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(k)) / max;
    if (!std::isfinite(iscale)) continue;  // a subnormal max
    const CandidateSums c =
        lanes ? symmetric_sums_sse2(x, n, nmax, iscale) : symmetric_sums_scalar(x, n, nmax, iscale);
    const int sqq = c.sqq;
    if (sqq <= 0) continue;
    const double sqx = c.sqx();
    if (best_sqq == 0 || sqx * sqx * best_sqq > best_sqx * best_sqx * sqq) {
      best_sqx = sqx;
      best_sqq = sqq;
    }
  }
  return best_sqq > 0 ? static_cast<float>(best_sqx / best_sqq) : max / static_cast<float>(-nmax);
}

}  // namespace

void fit_scale_min_reference(const float* x, int n, int nmax, float* s_out, float* m_out) {
  fit_scale_min_with<false>(x, n, nmax, s_out, m_out);
}
void fit_scale_min(const float* x, int n, int nmax, float* s_out, float* m_out) {
  fit_scale_min_with<true>(x, n, nmax, s_out, m_out);
}
float fit_symmetric_reference(const float* x, int n, int nmax) {
  return fit_symmetric_with<false>(x, n, nmax);
}
float fit_symmetric(const float* x, int n, int nmax) {
  return fit_symmetric_with<true>(x, n, nmax);
}

}  // namespace steermoe::quant
