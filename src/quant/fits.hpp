// The K-quants' scale searches, the quantizers' hot loop (`quantize` and `make-model --type`
// spend most of their time here). Each has a scalar reference, which defines the result, and
// the function quantize_row calls: SSE2 on x86-64 (four lanes that are the reference's four
// partial-sum chains, so the same operations in the same order and the same bits), the
// reference itself elsewhere. A NaN or an infinity counts as 0 in a fit (the caller's final
// rounding gives it its q). Exposed for tests/kernels/test_quant.cpp, which holds the two to
// each other.
#pragma once

namespace steermoe::quant {

// x ~ s * q - m with q in [0, nmax], m >= 0, over n <= 32 values: the least-squares s and m of
// the best of 21 candidate roundings (smallest squared error).
void fit_scale_min_reference(const float* x, int n, int nmax, float* s_out, float* m_out);
void fit_scale_min(const float* x, int n, int nmax, float* s_out, float* m_out);

// x ~ s * q with q in [-nmax, nmax - 1] over n <= 16 values: the least-squares s of the best of
// 19 candidate roundings.
float fit_symmetric_reference(const float* x, int n, int nmax);
float fit_symmetric(const float* x, int n, int nmax);

}  // namespace steermoe::quant
