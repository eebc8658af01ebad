// CPU kernels for the forward pass: matrix-vector / small matrix products over F32, BF16 and F16
// weights, RMSNorm, RoPE, attention over a KV cache, SwiGLU, softmax and vector helpers.
//
// Every kernel has a scalar reference and SIMD implementations (AVX2+FMA+F16C, AVX-512F,
// AVX-512 BF16). The implementation is chosen at run time from the CPU's features, so the binary
// runs on any x86-64. All reductions run in a FIXED order that depends only on the sizes (never on
// pointer alignment or thread count): for a given Isa, results are bit-identical for any number
// of threads, and a row of matmul() equals matvec() of that input row bit for bit, and
// attention_prefill() equals attention() query by query.
//
// Numerics per Isa differ (different blocking, the BF16 path rounds x to bf16 as the bf16
// reference models do); compare across Isas with tolerances, within one Isa bit for bit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "kernels/linear_attention.hpp"
#include "kernels/thread_pool.hpp"

namespace steermoe::kernels {

// ---- Element types and instruction sets ------------------------------------------------------

// Plain types (F32, BF16, F16) and block-quantized ones: the GGUF types (ggml byte layouts, see
// quant/quant.hpp) and FP8 E4M3 with 128 x 128 block scales (Matrix::scales).
enum class DType : uint8_t {
  kF32,
  kBF16,
  kF16,
  kQ8_0,
  kQ4_0,
  kQ4_1,
  kQ5_0,
  kQ5_1,
  kQ4_K,
  kQ5_K,
  kQ6_K,
  kQ2_K,
  kQ3_K,
  kF8E4M3,  // one byte per element; w = fp8 * scales[r / 128][c / 128]
};

std::string_view dtype_name(DType dtype);
// Bytes per element of a plain type (F32, BF16, F16) or of FP8; SM_ASSERTs on block types.
size_t dtype_size(DType dtype);
bool dtype_is_block(DType dtype);          // Q8_0 .. Q6_K (blocks of 32 or 256 elements)
size_t dtype_block_elements(DType dtype);  // 1 for plain types and FP8
size_t dtype_block_bytes(DType dtype);     // dtype_size for plain types and FP8
// Bytes of `elements` consecutive elements (a whole number of blocks; SM_ASSERT).
size_t row_bytes(DType dtype, size_t elements);
// The edge of an FP8 scale block (DeepSeek-V3 / Qwen3 "weight_block_size": [128, 128]).
inline constexpr size_t kFp8ScaleBlock = 128;

// bf16 / f16 <-> f32 conversions (round to nearest even; NaN stays NaN).
float bf16_to_f32(uint16_t v);
uint16_t f32_to_bf16(float v);
float f16_to_f32(uint16_t v);
uint16_t f32_to_f16(float v);

// An implementation level. kAvx2 needs AVX2+FMA+F16C; kAvx512 needs AVX-512F (+FMA, F16C);
// kAvx512Bf16 adds AVX512_BF16 and uses VDPBF16PS for BF16 weights: x is rounded to bf16 first
// (relative error 2^-9 per element, like a bf16 reference model); F32/F16 weights and every other
// kernel are the same as kAvx512.
enum class Isa : uint8_t { kScalar, kAvx2, kAvx512, kAvx512Bf16 };

std::string_view isa_name(Isa isa);
bool isa_available(Isa isa);  // does this CPU have the features?
Isa best_isa();               // highest available level (cached)

// Process-wide level used by the free functions below; defaults to best_isa(). Throws Error if
// the CPU lacks `isa`. Set it before starting work, not concurrently with kernel calls.
void set_active_isa(Isa isa);
Isa active_isa();
// STEERMOE_KERNELS=scalar|avx2|avx512|avx512bf16, when set and not empty, made the active level
// (every program calls this once at start: the CLI and the benchmarks alike). Throws Error
// naming the variable for any other value, or if the CPU lacks the level.
void select_isa_from_env();

// ---- Views ----------------------------------------------------------------------------------

// A row-major weight matrix W[rows][cols]; row r starts at data + r * row_stride elements
// (for block types, row_stride and cols are whole numbers of blocks and row r starts at byte
// row_bytes(dtype, r * stride())).
//
// FP8 (kF8E4M3): `scales` holds the f32 block scales (HF "weight_scale_inv", multiplied in):
// element (r, c) is fp8(r, c) * scales[(r / 128) * scale_stride + c / 128]; row 0 of the
// matrix is the first row of a 128-row scale block.
struct Matrix {
  const void* data = nullptr;
  DType dtype = DType::kF32;
  size_t rows = 0;
  size_t cols = 0;
  size_t row_stride = 0;          // elements between row starts; 0 means cols
  const float* scales = nullptr;  // FP8 only
  size_t scale_stride = 0;        // FP8 only: floats between scale rows; 0 means ceil(cols / 128)

  size_t stride() const { return row_stride == 0 ? cols : row_stride; }
  size_t scale_row_stride() const {
    return scale_stride == 0 ? (cols + kFp8ScaleBlock - 1) / kFp8ScaleBlock : scale_stride;
  }
};

// THE byte size of a matrix (model::matrix_bytes calls this): its element bytes (rows * cols in the
// stored type) plus, for FP8, its scale bytes. Expert copies, bytes-per-token figures and traces'
// expert_bytes use this.
size_t stored_bytes(const Matrix& m);

// The memory a matrix reads, as (pointer, bytes) ranges: [0] the elements (from data to the end
// of the last row), [1] the FP8 scales (absent for other types). Copying every range (and
// pointing data / scales at the copies) moves the whole matrix. Sum of bytes == stored_bytes
// when row_stride is 0 or cols. (model::matrix_bytes returns the same.)
struct ByteRange {
  const void* data = nullptr;
  size_t bytes = 0;
};
struct MatrixRanges {
  ByteRange range[2];
  size_t count = 0;
};
MatrixRanges matrix_ranges(const Matrix& m);

// Row r of w as f32 (dst: w.cols floats), any dtype.
void dequantize_row(const Matrix& w, size_t r, float* dst);

namespace detail {
struct ActQ8;
}

struct MatvecParams {
  float scale = 1.0f;       // y = scale * (W x)
  bool accumulate = false;  // y += scale * (W x) instead of overwriting y
  // Set by matmul() for block-type weights: its n inputs quantized once for the whole product
  // (the same bits each row chunk would make), so the row chunks do not quantize them again.
  // Null: each call of matmul_rows quantizes its inputs itself.
  const detail::ActQ8* quantized_inputs = nullptr;
};

// ---- Matrix products (threaded over output rows; each row computed by one thread) ------------

// y[r] = scale * sum_c W[r][c] * x[c] (+ y[r]), r in [0, w.rows). x: w.cols floats.
void matvec(ThreadPool& pool, const Matrix& w, const float* x, float* y, MatvecParams p = {});

// Y[i][r] = scale * sum_c W[r][c] * X[i][c] (+ Y[i][r]) for i in [0, n): prefill. Reads each
// weight row from memory once for all n. X rows are x_stride floats apart (0: w.cols), Y rows
// y_stride floats apart (0: w.rows). Row i of the result is bit-identical to matvec(X[i]).
void matmul(ThreadPool& pool, const Matrix& w, const float* x, size_t n, float* y,
            MatvecParams p = {}, size_t x_stride = 0, size_t y_stride = 0);

// Several independent products run in one parallel_for (one synchronisation instead of one per
// matrix: decode's q/k/v projections, or the gate_up matrices of the selected experts). The rows of
// all jobs are split across threads together; results are bit-identical to calling matvec() on
// each job. Jobs must not write to each other's inputs.
struct MatvecJob {
  Matrix w;
  const float* x = nullptr;
  float* y = nullptr;
  MatvecParams params;
};
void matvec_batch(ThreadPool& pool, const MatvecJob* jobs, size_t n_jobs);

// The same for n > 1 inputs per job (prefill: an expert's gate and up over its tokens, the q / k
// / v projections of a batch): one parallel_for over the rows of every job, X rows w.cols floats
// apart and Y rows w.rows apart, as matmul() with strides 0: matmul_grouped below with the
// same n for every job (consecutive block-type jobs of the same x share one quantization). Results
// are bit-identical to calling matmul() on each job. At most kMaxBatchJobs jobs.
constexpr size_t kMaxBatchJobs = 8;
void matmul_batch(ThreadPool& pool, const MatvecJob* jobs, size_t n_jobs, size_t n);

// Products with their own number of inputs each (prefill's experts, each over the tokens routed
// to it), any number of them, under two synchronisations: one that quantizes every distinct
// block-type input once (jobs that follow each other with the same x, n and cols share it, as an
// expert's gate and up do), one that runs the rows of all jobs laid end to end, a row of job j
// weighing n_j (its cost grows with its inputs), split over the threads as one range. X rows
// w.cols floats apart, Y rows w.rows apart; n = 0 is a job with nothing to do. Results are
// bit-identical to calling matmul() on each job. Grow-only scratch: nothing allocates after the
// first call of the largest sizes.
struct MatmulJob {
  Matrix w;
  const float* x = nullptr;
  float* y = nullptr;
  size_t n = 0;
  MatvecParams params;
};
void matmul_grouped(ThreadPool& pool, const MatmulJob* jobs, size_t n_jobs);

// ---- Normalisation, activation, positional encoding -----------------------------------------

struct RmsNormParams {
  float eps = 1e-5f;
  // y = x * rsqrt(mean(x^2) + eps) * (weight + weight_offset). weight may be null (treated as 1).
  // weight_offset 1 gives the Gemma3 / Qwen3.5 style with zero-centred weights.
  float weight_offset = 0.0f;
};

// out[i] = x[i] / sqrt(mean(x^2) + eps) * (w[i] + offset). out may alias x.
void rmsnorm(const float* x, const float* weight, float* out, size_t n, RmsNormParams p = {});
// The same applied to `rows` consecutive vectors of n floats each (e.g. per-head q/k norms).
void rmsnorm_rows(const float* x, const float* weight, float* out, size_t rows, size_t n,
                  RmsNormParams p = {});

enum class RopeStyle : uint8_t {
  kNeox,        // rotate-half: pairs (i, i + rot_dim/2)  (Llama, OLMoE, Qwen)
  kInterleaved  // GPT-J: pairs (2i, 2i + 1)              (DeepSeek MLA rope_interleave)
};

struct RopeParams {
  RopeStyle style = RopeStyle::kNeox;
  size_t head_dim = 0;    // floats between consecutive heads in the buffer
  size_t rot_offset = 0;  // first rotated element of each head (MLA: q_nope size, 128)
  size_t rot_dim = 0;     // rotated elements (even); 0 means head_dim (full rotary)
  float theta = 10000.0f;
  // Scaled RoPE (YaRN): rot_dim / 2 inverse frequencies used instead of theta^(-2i/rot_dim), and
  // the factor cos/sin are multiplied by (transformers' attention_scaling).
  const float* inv_freq = nullptr;
  float attention_factor = 1.0f;
};

// Rotates x[h * head_dim + rot_offset + ...] for h in [0, n_heads) in place for position `pos`.
// Frequencies inv_freq[i] = theta^(-2i/rot_dim) (fp32, like transformers); angle = pos * inv_freq
// in fp32; cos/sin rounded to fp32.
void rope(float* x, size_t n_heads, size_t pos, const RopeParams& p);

// out[i] = silu(gate[i]) * up[i], silu(g) = g / (1 + exp(-g)). out may alias gate or up.
void swiglu(const float* gate, const float* up, float* out, size_t n);

// In place: x = exp(x - max) / sum. Fixed-order sum.
void softmax(float* x, size_t n);

float dot(const float* a, const float* b, size_t n);
void axpy(float a, const float* x, float* y, size_t n);          // y += a * x
void add(const float* a, const float* b, float* out, size_t n);  // out = a + b (may alias)
void scale(float a, float* x, size_t n);                         // x *= a

// ---- Attention over an f32 KV cache ---------------------------------------------------------

// Layout: q[h * q_head_stride + d]; key at position t of kv head g at
// k[t * k_pos_stride + g * head_dim_k + d]; value likewise with v_pos_stride and head_dim_v;
// out[h * out_head_stride + d]. Query head h reads kv head h / (n_heads / n_kv_heads) (GQA).
struct AttentionParams {
  size_t n_heads = 0;
  size_t n_kv_heads = 0;       // divides n_heads
  size_t head_dim_k = 0;       // q and k (e.g. 192 for MLA)
  size_t head_dim_v = 0;       // v and out (e.g. 128 for MLA)
  float scale = 1.0f;          // usually head_dim_k^-0.5
  size_t q_head_stride = 0;    // 0: head_dim_k
  size_t out_head_stride = 0;  // 0: head_dim_v
  size_t k_pos_stride = 0;     // 0: n_kv_heads * head_dim_k
  size_t v_pos_stride = 0;     // 0: n_kv_heads * head_dim_v
};

// One query attending to positions [0, n_pos) (the query's own position is n_pos - 1, so causal
// by construction). Threaded over heads; uses per-thread scratch that grows once.
void attention(ThreadPool& pool, const float* q, const float* k, const float* v, size_t n_pos,
               float* out, const AttentionParams& p);

// n_q queries at positions first_pos .. first_pos + n_q - 1 (causal): query i sees keys
// [0, first_pos + i]. The cache must already hold keys/values up to first_pos + n_q - 1.
// q rows are q_stride floats apart, out rows out_stride apart. Query i is bit-identical to
// attention() with n_pos = first_pos + i + 1.
void attention_prefill(ThreadPool& pool, const float* q, size_t q_stride, size_t n_q,
                       size_t first_pos, const float* k, const float* v, float* out,
                       size_t out_stride, const AttentionParams& p);

// ---- Per-Isa tables (tests and benchmarks compare implementations through these) ------------

// Single-threaded entry points of one implementation. Row ranges let a caller split work.
struct KernelTable {
  Isa isa;
  // y[r - row_begin] for r in [row_begin, row_end), as matvec() (y points at row_begin's slot).
  void (*matvec_rows)(const Matrix& w, const float* x, float* y, size_t row_begin, size_t row_end,
                      const MatvecParams& p);
  // Y[i][r] for r in [row_begin, row_end), i in [0, n); y points at Y[0][0].
  void (*matmul_rows)(const Matrix& w, const float* x, size_t x_stride, size_t n, float* y,
                      size_t y_stride, size_t row_begin, size_t row_end, const MatvecParams& p);
  void (*rmsnorm)(const float* x, const float* weight, float* out, size_t n,
                  const RmsNormParams& p);
  void (*rope)(float* x, size_t n_heads, size_t pos, const RopeParams& p);
  void (*swiglu)(const float* gate, const float* up, float* out, size_t n);
  void (*softmax)(float* x, size_t n);
  float (*dot)(const float* a, const float* b, size_t n);
  void (*axpy)(float a, const float* x, float* y, size_t n);
  void (*add)(const float* a, const float* b, float* out, size_t n);
  void (*scale)(float a, float* x, size_t n);
  // Attention of one query for heads [head_begin, head_end); scratch holds n_pos floats.
  void (*attention_heads)(const float* q, const float* k, const float* v, size_t n_pos, float* out,
                          const AttentionParams& p, size_t head_begin, size_t head_end,
                          float* scratch);
  // Gated DeltaNet, one token (contracts and numerics in linear_attention.hpp; the kScalar
  // entries are the kernels::reference functions).
  void (*conv1d_silu_step)(float* state, const float* x, const float* w, size_t channels, size_t k,
                           float* out);
  void (*l2norm)(float* x, size_t n, float eps);
  void (*delta_rule_step)(float* state, const float* q, const float* k, const float* v, float g,
                          float beta, size_t dk, size_t dv, float* out);
  void (*rmsnorm_gated)(const float* x, const float* w, const float* z, float* out, size_t n,
                        float eps);
  void (*delta_rule_chunked)(float* state, const float* q, const float* k, const float* v,
                             const float* g, const float* beta, float* out,
                             const DeltaRuleChunkParams& p);
  // One input row quantized the way block-type products read it (into `scratch`, act_bytes(n)
  // bytes, 64-byte aligned; quant_internal.hpp): the same bits on every Isa.
  detail::ActQ8 (*quantize_input)(const float* x, size_t n, void* scratch);
};

// The table of `isa`; throws Error if the CPU lacks it.
const KernelTable& kernel_table(Isa isa);
// The table of active_isa().
const KernelTable& active_kernels();

}  // namespace steermoe::kernels
