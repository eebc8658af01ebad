#include "eval/stats.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "common/error.hpp"

namespace steermoe::eval {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Continued fraction of I_x(a, b) (modified Lentz), valid for x < (a + 1) / (a + b + 2).
double beta_continued_fraction(double a, double b, double x) {
  constexpr double kTiny = 1e-300;
  const double qab = a + b, qap = a + 1.0, qam = a - 1.0;
  double c = 1.0;
  double d = 1.0 - qab * x / qap;
  if (std::fabs(d) < kTiny) d = kTiny;
  d = 1.0 / d;
  double h = d;
  for (int m = 1; m <= 10000; ++m) {
    const double m2 = 2.0 * m;
    double aa = m * (b - m) * x / ((qam + m2) * (a + m2));
    d = 1.0 + aa * d;
    if (std::fabs(d) < kTiny) d = kTiny;
    c = 1.0 + aa / c;
    if (std::fabs(c) < kTiny) c = kTiny;
    d = 1.0 / d;
    h *= d * c;
    aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2));
    d = 1.0 + aa * d;
    if (std::fabs(d) < kTiny) d = kTiny;
    c = 1.0 + aa / c;
    if (std::fabs(c) < kTiny) c = kTiny;
    d = 1.0 / d;
    const double del = d * c;
    h *= del;
    if (std::fabs(del - 1.0) < 1e-16) break;
  }
  return h;
}

// I_x(a, b) given x and y = 1 - x (each computed accurately by the caller).
double incomplete_beta_xy(double a, double b, double x, double y) {
  SM_ASSERT(a > 0 && b > 0 && x >= 0 && x <= 1 && y >= 0 && y <= 1);
  if (x == 0.0) return 0.0;
  if (y == 0.0) return 1.0;
  const double log_front =
      std::lgamma(a + b) - std::lgamma(a) - std::lgamma(b) + a * std::log(x) + b * std::log(y);
  if (x < (a + 1.0) / (a + b + 2.0))
    return std::exp(log_front) * beta_continued_fraction(a, b, x) / a;
  return 1.0 - std::exp(log_front) * beta_continued_fraction(b, a, y) / b;
}

// Upper tail P(T > t) of Student t, t >= 0: I_{df/(df+t^2)}(df/2, 1/2) / 2.
double student_t_upper(double t, double df) {
  if (std::isinf(t)) return 0.0;
  const double t2 = t * t;
  const double x = df / (df + t2);
  const double y = t2 / (df + t2);
  return 0.5 * incomplete_beta_xy(0.5 * df, 0.5, x, y);
}

// Solves cdf(q) = p for an increasing cdf by bracketing and bisection to adjacent doubles.
template <typename Cdf>
double invert_cdf(Cdf cdf, double p) {
  double lo = -1.0, hi = 1.0;
  while (cdf(lo) > p) lo *= 2.0;
  while (cdf(hi) < p) hi *= 2.0;
  for (int i = 0; i < 2000; ++i) {
    const double mid = 0.5 * (lo + hi);
    if (mid <= lo || mid >= hi) break;
    if (cdf(mid) < p)
      lo = mid;
    else
      hi = mid;
  }
  return 0.5 * (lo + hi);
}

// Random bits for the randomized sign-flip test (splitmix64: small, seeded, portable).
struct SplitMix64 {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
};

}  // namespace

double incomplete_beta(double a, double b, double x) {
  return incomplete_beta_xy(a, b, x, 1.0 - x);
}

double student_t_cdf(double t, double df) {
  if (std::isnan(t)) return kNaN;
  const double upper = student_t_upper(std::fabs(t), df);
  return t >= 0 ? 1.0 - upper : upper;
}

double student_t_quantile(double p, double df) {
  if (!(p > 0.0 && p < 1.0)) return p == 0.0 ? -INFINITY : p == 1.0 ? INFINITY : kNaN;
  if (p == 0.5) return 0.0;
  // Solve in the tail of the smaller side for relative accuracy there.
  if (p > 0.5) return -student_t_quantile(1.0 - p, df);
  return invert_cdf([df](double t) { return t >= 0 ? 1.0 : student_t_upper(-t, df); }, p);
}

double normal_cdf(double x) {
  return 0.5 * std::erfc(-x / std::sqrt(2.0));
}

double normal_quantile(double p) {
  if (!(p > 0.0 && p < 1.0)) return p == 0.0 ? -INFINITY : p == 1.0 ? INFINITY : kNaN;
  if (p == 0.5) return 0.0;
  if (p > 0.5) return -normal_quantile(1.0 - p);
  return invert_cdf([](double x) { return normal_cdf(x); }, p);
}

MeanInterval mean_t_interval(std::span<const double> d, double level) {
  MeanInterval r;
  r.n = static_cast<int64_t>(d.size());
  if (d.empty()) {
    r.mean = r.sd = r.se = r.ci_low = r.ci_high = kNaN;
    return r;
  }
  double sum = 0.0;
  for (double v : d) sum += v;
  r.mean = sum / static_cast<double>(d.size());
  if (d.size() < 2) {
    r.sd = r.se = r.ci_low = r.ci_high = kNaN;
    return r;
  }
  double ss = 0.0;
  for (double v : d) ss += (v - r.mean) * (v - r.mean);
  r.sd = std::sqrt(ss / static_cast<double>(d.size() - 1));
  r.se = r.sd / std::sqrt(static_cast<double>(d.size()));
  const double q = student_t_quantile(0.5 * (1.0 + level), static_cast<double>(d.size() - 1));
  r.ci_low = r.mean - q * r.se;
  r.ci_high = r.mean + q * r.se;
  return r;
}

double binomial_half_log_cdf(int64_t k, int64_t n) {
  SM_ASSERT(n >= 0 && k >= 0 && k <= n);
  const double dn = static_cast<double>(n);
  const double log_norm = std::lgamma(dn + 1.0) - dn * std::log(2.0);
  // log-sum-exp over i = 0..k of log C(n, i) - n log 2, largest term last (i = k for k <= n/2).
  std::vector<double> terms(static_cast<size_t>(k) + 1);
  double max_term = -INFINITY;
  for (int64_t i = 0; i <= k; ++i) {
    const double di = static_cast<double>(i);
    terms[static_cast<size_t>(i)] = log_norm - std::lgamma(di + 1.0) - std::lgamma(dn - di + 1.0);
    max_term = std::max(max_term, terms[static_cast<size_t>(i)]);
  }
  double s = 0.0;
  for (double t : terms) s += std::exp(t - max_term);
  return max_term + std::log(s);
}

double mcnemar_exact_p(int64_t b, int64_t c) {
  SM_ASSERT(b >= 0 && c >= 0);
  const int64_t n = b + c;
  if (n == 0 || b == c) return 1.0;
  const double p = 2.0 * std::exp(binomial_half_log_cdf(std::min(b, c), n));
  return std::min(1.0, p);
}

SignFlipResult sign_flip_test(std::span<const double> d, int exact_limit, int64_t draws,
                              uint64_t seed) {
  SM_ASSERT(exact_limit >= 0 && exact_limit <= 20);
  SignFlipResult r;
  const size_t n = d.size();
  if (n == 0) {
    r.p = kNaN;
    return r;
  }
  double observed = 0.0, abs_sum = 0.0;
  for (double v : d) {
    observed += v;
    abs_sum += std::fabs(v);
  }
  if (abs_sum == 0.0) {  // every difference is 0: every sign pattern gives the observed value
    r.p = 1.0;
    r.patterns = n <= static_cast<size_t>(exact_limit) ? (int64_t{1} << n) : draws;
    r.exact = n <= static_cast<size_t>(exact_limit);
    return r;
  }
  const double tol = 1e-12 * abs_sum;
  int64_t le = 0, ge = 0;
  if (n <= static_cast<size_t>(exact_limit)) {
    // Meet in the middle: sums of the first half and of the second half, each computed directly.
    const size_t h = n / 2;
    auto half_sums = [&](size_t from, size_t count) {
      std::vector<double> sums(size_t{1} << count);
      for (size_t mask = 0; mask < sums.size(); ++mask) {
        double s = 0.0;
        for (size_t i = 0; i < count; ++i) s += (mask >> i & 1u) ? -d[from + i] : d[from + i];
        sums[mask] = s;
      }
      return sums;
    };
    const std::vector<double> first = half_sums(0, h), second = half_sums(h, n - h);
    for (double a : first) {
      for (double b : second) {
        const double t = a + b;
        le += t <= observed + tol;
        ge += t >= observed - tol;
      }
    }
    r.exact = true;
    r.patterns = int64_t{1} << n;
    const double total = static_cast<double>(r.patterns);
    r.p = std::min(1.0, 2.0 * std::min(static_cast<double>(le), static_cast<double>(ge)) / total);
    return r;
  }
  SM_ASSERT(draws >= 100000);
  SplitMix64 rng{seed};
  for (int64_t k = 0; k < draws; ++k) {
    double t = 0.0;
    uint64_t bits = 0;
    for (size_t i = 0; i < n; ++i) {
      if (i % 64 == 0) bits = rng.next();
      t += (bits & 1u) ? -d[i] : d[i];
      bits >>= 1;
    }
    le += t <= observed + tol;
    ge += t >= observed - tol;
  }
  r.exact = false;
  r.patterns = draws;
  const double denom = static_cast<double>(draws) + 1.0;
  const double p_less = (static_cast<double>(le) + 1.0) / denom;
  const double p_greater = (static_cast<double>(ge) + 1.0) / denom;
  r.p = std::min(1.0, 2.0 * std::min(p_less, p_greater));
  return r;
}

std::vector<double> holm(std::span<const double> p) {
  std::vector<double> out(p.size(), kNaN);
  std::vector<size_t> order;
  for (size_t i = 0; i < p.size(); ++i)
    if (!std::isnan(p[i])) order.push_back(i);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return p[a] < p[b]; });
  const double m = static_cast<double>(order.size());
  double running = 0.0;
  for (size_t rank = 0; rank < order.size(); ++rank) {
    const double adj = std::min(1.0, (m - static_cast<double>(rank)) * p[order[rank]]);
    running = std::max(running, adj);
    out[order[rank]] = running;
  }
  return out;
}

TTestResult paired_t_test(std::span<const double> d) {
  TTestResult r;
  r.df = static_cast<double>(d.size()) - 1.0;
  const MeanInterval m = mean_t_interval(d);
  if (d.size() < 2 || (m.sd == 0.0 && m.mean == 0.0)) {
    r.t = r.p = kNaN;
    return r;
  }
  if (m.sd == 0.0) {
    r.t = m.mean > 0 ? INFINITY : -INFINITY;
    r.p = 0.0;
    return r;
  }
  r.t = m.mean / m.se;
  r.p = std::min(1.0, 2.0 * student_t_upper(std::fabs(r.t), r.df));
  return r;
}

RatioResult latency_ratio(std::span<const double> a, std::span<const double> b, double level) {
  SM_ASSERT(a.size() == b.size());
  std::vector<double> d(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    SM_ASSERT(a[i] > 0 && b[i] > 0);
    d[i] = std::log(b[i]) - std::log(a[i]);
  }
  const MeanInterval m = mean_t_interval(d, level);
  RatioResult r;
  r.rounds = m.n;
  r.ratio = std::exp(m.mean);
  r.ci_low = std::exp(m.ci_low);
  r.ci_high = std::exp(m.ci_high);
  r.p = paired_t_test(d).p;
  return r;
}

TaskMean mean_over_tasks(std::span<const double> means, std::span<const double> ses, double level) {
  SM_ASSERT(means.size() == ses.size());
  TaskMean r;
  r.tasks = static_cast<int64_t>(means.size());
  if (means.empty()) {
    r.mean = r.se = r.ci_low = r.ci_high = kNaN;
    return r;
  }
  double sum = 0.0, var = 0.0;
  for (size_t i = 0; i < means.size(); ++i) {
    sum += means[i];
    var += ses[i] * ses[i];
  }
  const double T = static_cast<double>(means.size());
  r.mean = sum / T;
  r.se = std::sqrt(var) / T;
  const double z = normal_quantile(0.5 * (1.0 + level));
  r.ci_low = r.mean - z * r.se;
  r.ci_high = r.mean + z * r.se;
  return r;
}

}  // namespace steermoe::eval
