// Paired statistics for comparing two configurations on the same items (questions, windows,
// timing rounds). Every function is a plain computation on doubles; the definitions and the
// SciPy calls they are checked against are in README.md ("Statistics") and
// tools/eval/make_expected.py.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace steermoe::eval {

// --- Distributions (double precision; about 1e-13 relative in the tails tested) ---

// Regularized incomplete beta I_x(a, b), a, b > 0, 0 <= x <= 1.
double incomplete_beta(double a, double b, double x);
// Student t with `df` > 0 degrees of freedom: CDF and quantile (scipy.stats.t.cdf / .ppf).
double student_t_cdf(double t, double df);
double student_t_quantile(double p, double df);
// Standard normal CDF and quantile (scipy.stats.norm.cdf / .ppf).
double normal_cdf(double x);
double normal_quantile(double p);

// --- Paired differences d_i = b_i - a_i ---

// Mean of d with the t interval mean +- t_{(1+level)/2, n-1} * sd / sqrt(n) (sd with n - 1),
// i.e. scipy.stats.t.interval(level, n - 1, loc=mean, scale=sem). n = 1: sd, se and the
// interval are NaN. All d equal (sd = 0, n >= 2): the interval is [mean, mean] (SciPy returns
// NaN for a zero scale; we report the degenerate interval).
struct MeanInterval {
  int64_t n = 0;
  double mean = 0.0;
  double sd = 0.0;  // sample standard deviation (n - 1)
  double se = 0.0;  // sd / sqrt(n)
  double ci_low = 0.0;
  double ci_high = 0.0;
};
MeanInterval mean_t_interval(std::span<const double> d, double level = 0.95);

// Exact two-sided McNemar test for paired 0/1 scores: with b = #(a=1, b=0) and c = #(a=0, b=1),
// the binomial test of min(b, c) on b + c trials with p = 1/2:
// min(1, 2 * P(X <= min(b, c))) = scipy.stats.binomtest(b, b + c, 0.5).pvalue; 1 when b + c = 0.
double mcnemar_exact_p(int64_t b, int64_t c);
// log of the binomial(n, 1/2) CDF at k (for tests and the above).
double binomial_half_log_cdf(int64_t k, int64_t n);

// Paired sign-flip permutation test of mean(d) = 0, two-sided: the null distribution of
// sum(s_i d_i) over sign vectors s. Exact enumeration of all 2^n vectors when n <= exact_limit
// (at most 20), else `draws` (>= 1e5) seeded random vectors with p = (count + 1) / (draws + 1)
// per side as SciPy's randomized permutation_test. Two-sided p = min(1, 2 * min(P(T <= t),
// P(T >= t))) as scipy.stats.permutation_test(..., permutation_type='samples'). Statistics
// within 1e-12 * sum|d_i| of the observed one count as equal to it (exact on inputs whose sums
// are exactly representable).
struct SignFlipResult {
  double p = 1.0;
  bool exact = true;
  int64_t patterns = 0;  // 2^n (exact) or the number of draws
};
SignFlipResult sign_flip_test(std::span<const double> d, int exact_limit = 20,
                              int64_t draws = 100000, uint64_t seed = 20260101);

// Holm's step-down adjustment (family-wise error): sorted ascending, p_(i) * (m - i + 1),
// made monotone and capped at 1; returned in the input order. NaN entries stay NaN and are not
// counted in m.
std::vector<double> holm(std::span<const double> p);

// Paired t-test of mean(d) = 0, two-sided: scipy.stats.ttest_rel(b, a) (or ttest_1samp(d, 0)).
// n < 2 or all d = 0: NaN; sd = 0 with mean != 0: p = 0, t = +-inf.
struct TTestResult {
  double t = 0.0;
  double df = 0.0;
  double p = 0.0;
};
TTestResult paired_t_test(std::span<const double> d);

// Latency ratio b / a over paired repetitions (Kalibera and Jones: the repetition is the unit):
// d_r = log(b_r) - log(a_r); ratio = exp(mean d) with the t interval of mean d exponentiated,
// and the paired t-test on d. Inputs must be > 0.
struct RatioResult {
  int64_t rounds = 0;
  double ratio = 0.0;
  double ci_low = 0.0;
  double ci_high = 0.0;
  double p = 0.0;
};
RatioResult latency_ratio(std::span<const double> a, std::span<const double> b,
                          double level = 0.95);

// Mean of per-task mean differences with a normal interval that treats tasks as independent:
// mean = sum(m_t) / T, se = sqrt(sum(se_t^2)) / T, interval mean +- z_{(1+level)/2} se
// (the paper's "mean over tasks, 95% lower bound"). A NaN se makes the interval NaN.
struct TaskMean {
  int64_t tasks = 0;
  double mean = 0.0;
  double se = 0.0;
  double ci_low = 0.0;
  double ci_high = 0.0;
};
TaskMean mean_over_tasks(std::span<const double> means, std::span<const double> ses,
                         double level = 0.95);

}  // namespace steermoe::eval
