// Values for tensor slots: read back from a loaded model (convert) or drawn at random
// (make-model), and the named real shapes.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <optional>
#include <utility>

#include "common/error.hpp"
#include "kernels/thread_pool.hpp"
#include "model/family_def.hpp"
#include "model/weights_binder.hpp"
#include "model/weights_layout.hpp"

namespace steermoe::model {

namespace {

DType to_model_dtype(kernels::DType d) {
  return model_dtype(d);
}

const kernels::Matrix& expert_matrix(const LayerWeights& w, Role role, size_t e) {
  const SwigluWeights& s = w.experts[e];
  return role == Role::kExpGate ? s.gate : role == Role::kExpUp ? s.up : s.down;
}

// The bound matrix of a non-stacked slot; nullptr for vectors, the embedding, stacked experts
// and the MLA k_b / v_b halves.
const kernels::Matrix* matrix_of(const Model& m, const TensorSlot& s) {
  if (s.role == Role::kOutput) return &m.lm_head();
  if (s.layer < 0) return nullptr;
  const LayerWeights& w = m.layer(s.layer);
  switch (s.role) {
    case Role::kWq:
      return &w.wq;
    case Role::kWk:
      return &w.wk;
    case Role::kWv:
      return &w.wv;
    case Role::kWo:
      return &w.wo;
    case Role::kQa:
      return &w.q_a;
    case Role::kQb:
      return &w.q_b;
    case Role::kKvA:
      return &w.kv_a;
    case Role::kKvB:
      return &w.kv_b;
    case Role::kRouter:
      return &w.router;
    case Role::kSharedGate:
      return &w.shared.gate;
    case Role::kSharedUp:
      return &w.shared.up;
    case Role::kSharedDown:
      return &w.shared.down;
    case Role::kDenseGate:
      return &w.dense.gate;
    case Role::kDenseUp:
      return &w.dense.up;
    case Role::kDenseDown:
      return &w.dense.down;
    case Role::kExpGate:
    case Role::kExpUp:
    case Role::kExpDown:
      return s.expert >= 0 ? &expert_matrix(w, s.role, static_cast<size_t>(s.expert)) : nullptr;
    default:
      return nullptr;
  }
}

const WeightVector* vector_of(const Model& m, const TensorSlot& s) {
  if (s.role == Role::kFinalNorm) return &m.final_norm();
  if (s.layer < 0) return nullptr;
  const LayerWeights& w = m.layer(s.layer);
  switch (s.role) {
    case Role::kAttnNorm:
      return &w.attn_norm;
    case Role::kFfnNorm:
      return &w.ffn_norm;
    case Role::kQNorm:
      return &w.q_norm;
    case Role::kKNorm:
      return &w.k_norm;
    case Role::kQaNorm:
      return &w.q_a_norm;
    case Role::kKvANorm:
      return &w.kv_a_norm;
    case Role::kRouterBias:
      return &w.router_bias;
    default:
      return nullptr;
  }
}

// The rows of `mat` stored as `dtype`: the bytes unchanged when the type is kept, otherwise
// dequantized row by row to f32 and encoded as `dtype` (convert_from_f32).
// convert_from_f32 split over `pool`'s threads in whole blocks (identical bytes for any thread
// count): the quantizers are the slow part of `make-model --type`.
void convert_from_f32(DType dtype, std::span<const float> src, std::span<std::byte> dst,
                      std::string_view what, kernels::ThreadPool& pool) {
  const auto expected = dtype_byte_size(dtype, src.size());
  if (!expected || *expected != dst.size() || pool.size() == 1 || !dtype_is_quantized(dtype)) {
    convert_from_f32(dtype, src, dst, what);  // checks the sizes; plain types are memory-bound
    return;
  }
  // Units of 16 blocks keep each thread's span whole blocks and its output on its own lines.
  const size_t block = dtype_block_elements(dtype) * 16;
  const size_t units = (src.size() + block - 1) / block;
  pool.parallel_for(units, [&](size_t begin, size_t end) {
    const size_t e0 = begin * block;
    const size_t e1 = std::min(src.size(), end * block);
    const size_t b0 = *dtype_byte_size(dtype, e0);
    const size_t b1 = *dtype_byte_size(dtype, e1);
    convert_from_f32(dtype, src.subspan(e0, e1 - e0), dst.subspan(b0, b1 - b0), what);
  });
}

// Rows converted per batch: about 1M values, so the threads get long spans and the buffers stay
// small.
constexpr size_t kBatchValues = size_t{1} << 20;

void write_matrix(const kernels::Matrix& mat, DType dtype, OutputFile& out, const std::string& name,
                  kernels::ThreadPool& pool) {
  if (to_model_dtype(mat.dtype) == dtype && mat.dtype != kernels::DType::kF8E4M3) {
    SM_ASSERT(mat.row_stride == 0 || mat.row_stride == mat.cols);
    out.write(mat.data, mat.rows * kernels::row_bytes(mat.dtype, mat.cols));
    return;
  }
  const size_t row_out = *dtype_byte_size(dtype, mat.cols);
  const size_t batch = std::max<size_t>(1, kBatchValues / std::max<size_t>(mat.cols, 1));
  std::vector<float> rows(std::min(batch, mat.rows) * mat.cols);
  std::vector<std::byte> bytes(std::min(batch, mat.rows) * row_out);
  for (size_t r0 = 0; r0 < mat.rows; r0 += batch) {
    const size_t n = std::min(batch, mat.rows - r0);
    // Each row is dequantized and encoded by one thread: the bytes do not depend on the split.
    pool.parallel_for(n, [&](size_t begin, size_t end) {
      for (size_t i = begin; i < end; ++i) {
        const std::span<float> row(rows.data() + i * mat.cols, mat.cols);
        kernels::dequantize_row(mat, r0 + i, row.data());
        convert_from_f32(dtype, row, std::span(bytes).subspan(i * row_out, row_out), name);
      }
    });
    out.write(std::span(bytes).first(n * row_out));
  }
}

kernels::Matrix embedding_matrix(const Model& m) {
  const TensorView& e = m.embedding();
  kernels::Matrix mat;
  mat.data = e.data;
  mat.dtype = *kernel_dtype(e.dtype);
  mat.rows = e.shape[0];
  mat.cols = e.shape[1];
  return mat;
}

// splitmix64: the i-th value (from 0) of a stream that starts at `state` is mix(state + (i + 1)
// * gamma), so values can be drawn in parallel by index.
constexpr uint64_t kGamma = 0x9E3779B97F4A7C15ull;
uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t hash_name(const std::string& s) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (char ch : s) h = (h ^ static_cast<uint8_t>(ch)) * 1099511628211ull;
  return h;
}

}  // namespace

bool slot_is_gguf(const TensorSlot& s) {
  return s.name.rfind("model.", 0) != 0 && s.name.rfind("lm_head", 0) != 0;
}

void write_rows(const kernels::Matrix& mat, std::span<const uint64_t> rows, DType dtype,
                const std::string& name, OutputFile& out, std::span<const uint64_t> columns) {
  SM_ASSERT(mat.row_stride == 0 || mat.row_stride == mat.cols);
  SM_ASSERT(columns.empty() || columns.size() == mat.cols);
  const uint64_t row_bytes = kernels::row_bytes(mat.dtype, mat.cols);
  const auto* base = static_cast<const std::byte*>(mat.data);
  // The stored bytes: rows moved whole, or columns moved in whole blocks (FP8's per-block scales
  // live beside the matrix, so it is always re-encoded).
  const bool same = to_model_dtype(mat.dtype) == dtype && mat.dtype != kernels::DType::kF8E4M3;
  const uint64_t block = kernels::dtype_block_elements(mat.dtype);
  bool whole_blocks = same;
  for (size_t j = 0; whole_blocks && j < columns.size(); j += block) {
    whole_blocks = columns[j] % block == 0;
    for (uint64_t i = 1; whole_blocks && i < block; ++i)
      whole_blocks = j + i < columns.size() && columns[j + i] == columns[j] + i;
  }
  if (whole_blocks) {
    const uint64_t block_bytes = kernels::row_bytes(mat.dtype, block);
    std::vector<std::byte> row(row_bytes);
    for (const uint64_t r : rows) {
      const std::byte* src = base + r * row_bytes;
      if (columns.empty()) {
        out.write(src, row_bytes);
        continue;
      }
      for (size_t j = 0; j < columns.size(); j += block)
        std::memcpy(&row[j / block * block_bytes], src + columns[j] / block * block_bytes,
                    block_bytes);
      out.write(row.data(), row.size());
    }
    return;
  }
  std::vector<float> values(mat.cols), moved(columns.empty() ? 0 : mat.cols);
  std::vector<std::byte> bytes(*dtype_byte_size(dtype, mat.cols));
  for (const uint64_t r : rows) {
    kernels::dequantize_row(mat, r, values.data());
    if (!columns.empty())
      for (size_t j = 0; j < columns.size(); ++j) moved[j] = values[columns[j]];
    convert_from_f32(dtype, columns.empty() ? values : moved, bytes, name);
    out.write(bytes);
  }
}

void write_f32_as(const std::vector<float>& v, DType dtype, const std::string& name,
                  OutputFile& out) {
  std::vector<std::byte> bytes(*dtype_byte_size(dtype, v.size()));
  convert_from_f32(dtype, v, bytes, name);
  out.write(bytes);
}

DType stored_dtype(const Model& m, const TensorSlot& s) {
  if (s.role == Role::kEmbed) return m.weight_dtype();
  if (auto d = family_def(m.config().family).stored_dtype(m, s)) return *d;
  if (const WeightVector* v = vector_of(m, s)) return v->source_dtype;
  if (const kernels::Matrix* mat = matrix_of(m, s)) return to_model_dtype(mat->dtype);
  SM_ASSERT(s.expert < 0);  // stacked experts
  return to_model_dtype(expert_matrix(m.layer(s.layer), s.role, 0).dtype);
}

SlotSource model_slot_source(const Model& m, DTypeChooser choose, int threads) {
  auto pool = std::make_shared<kernels::ThreadPool>(static_cast<size_t>(std::max(1, threads)));
  SlotSource src;
  src.dtype_of = [&m, choose](const TensorSlot& s) -> DType {
    const DType stored = stored_dtype(m, s);
    return choose ? choose(s, stored) : stored;
  };
  src.produce = [&m, pool](const TensorSlot& s, DType dtype, OutputFile& out) {
    if (family_def(m.config().family).produce(m, s, dtype, out)) return;
    if (s.role == Role::kEmbed) {
      if (m.weight_dtype() == dtype) {
        out.write(m.embedding().bytes());
      } else {
        write_matrix(embedding_matrix(m), dtype, out, s.name, *pool);
      }
    } else if (const WeightVector* v = vector_of(m, s)) {
      std::vector<std::byte> bytes(*dtype_byte_size(dtype, v->size()));
      convert_from_f32(dtype, *v, bytes, s.name);
      out.write(bytes);
    } else if (const kernels::Matrix* mat = matrix_of(m, s)) {
      write_matrix(*mat, dtype, out, s.name, *pool);
    } else {
      const LayerWeights& w = m.layer(s.layer);
      for (size_t e = 0; e < w.experts.size(); ++e) {
        write_matrix(expert_matrix(w, s.role, e), dtype, out, s.name, *pool);
      }
    }
  };
  return src;
}

SlotSource random_slot_source(DType dtype, uint64_t seed) {
  return random_slot_source(
      [dtype](const TensorSlot& s) { return s.vector() || s.f32_only ? DType::kF32 : dtype; }, seed,
      1);
}

namespace {

// Mean and standard deviation of a slot's random values (see random_slot_source).
std::pair<float, float> random_moments(const TensorSlot& s) {
  switch (s.role) {
    case Role::kEmbed:
      return {0.0f, 1.0f};
    case Role::kRouterBias:
      return {0.0f, 0.1f};
    case Role::kKB:
      return {0.0f, 1.0f / std::sqrt(static_cast<float>(s.shape[1]))};
    case Role::kLinALog:
      // HF A_log (A = exp(A_log) in ~[1, 2.5]) or GGUF ssm_a = -exp(A_log) (must be < 0).
      return {s.name.rfind("blk.", 0) == 0 ? -1.7f : 0.5f, 0.2f};
    case Role::kSharedExpGate:
      return {0.0f, 1.0f / std::sqrt(static_cast<float>(s.shape.back()))};
    default:
      if (s.vector()) return {1.0f, 0.1f};
      return {0.0f, 1.0f / std::sqrt(static_cast<float>(s.shape.back()))};
  }
}

}  // namespace

SlotSource random_slot_source(std::function<DType(const TensorSlot&)> dtype_of, uint64_t seed,
                              int threads) {
  auto pool = std::make_shared<kernels::ThreadPool>(static_cast<size_t>(std::max(1, threads)));
  SlotSource src;
  src.dtype_of = std::move(dtype_of);
  src.produce = [seed, pool](const TensorSlot& s, DType dt, OutputFile& out) {
    // Plain variables, not structured bindings: the lambda below captures `mean`, which
    // Clang before 16 refuses for a binding.
    const auto moments = random_moments(s);
    const float mean = std::get<0>(moments);
    // uniform(-a, a) has std a / sqrt(3)
    const float half_width = std::get<1>(moments) * std::sqrt(3.0f);
    const uint64_t state = seed ^ hash_name(s.name);
    // A multiple of every block (32, 256): chunks never split one.
    constexpr size_t kChunk = size_t{1} << 20;
    std::vector<float> values;
    std::vector<std::byte> bytes;
    for (uint64_t done = 0, total = s.elements(); done < total;) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(kChunk, total - done));
      values.resize(n);
      pool->parallel_for(
          n,
          [&](size_t begin, size_t end) {
            for (size_t i = begin; i < end; ++i) {
              const uint64_t z = mix64(state + (done + i + 1) * kGamma);
              const float u = static_cast<float>(z >> 40) * (1.0f / 16777216.0f);  // [0, 1)
              values[i] = mean + (2.0f * u - 1.0f) * half_width;
            }
          },
          4096);
      bytes.resize(*dtype_byte_size(dt, n));
      convert_from_f32(dt, values, bytes, s.name, *pool);
      out.write(bytes);
      done += n;
    }
  };
  return src;
}

ModelConfig shape_config(const std::string& shape) {
  ModelConfig c;
  c.source = "shape " + shape;
  c.rope = RopeKind::kNeox;
  c.max_positions = 4096;
  std::vector<std::string> names;
  for (const FamilyDef* def : family_defs())
    names.insert(names.end(), def->shapes.begin(), def->shapes.end());
  for (const FamilyDef* def : family_defs()) {
    names.insert(names.end(), def->small_shapes.begin(), def->small_shapes.end());
    if (def->shape(shape, c)) {  // sets the family
      if (c.moe_layer.empty()) c.moe_layer.assign(static_cast<size_t>(c.layers), 1);
      c.validate();
      return c;
    }
  }
  fail("--shape", "name", "expected {}, found '{}'", join_or(names), shape);
}

}  // namespace steermoe::model
