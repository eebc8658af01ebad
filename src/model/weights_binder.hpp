// Internal to model/: binds tensors of a Model by name with dtype and shape checks. Shared by
// weights.cpp (common tensors, feed-forward) and the families' mixer binders (families/*.cpp,
// gqa.cpp).
#pragma once

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "model/gguf.hpp"
#include "model/safetensors.hpp"
#include "model/weights.hpp"

namespace steermoe::model {

// Looks tensors up by name in the model's file(s) and checks dtype and shape. Knows the names of
// both formats; the family-specific binding lives in the family files.
class WeightBinder {
 public:
  explicit WeightBinder(Model& model) : m_(model) {}

  bool gguf() const { return m_.format_ == WeightFormat::kGguf; }
  const std::string& where() const { return where_; }
  void set_where(std::string where) { where_ = std::move(where); }

  std::optional<TensorView> find(const std::string& name) const {
    if (!gguf()) return m_.checkpoint_->find_tensor(name);
    for (const GgufFile& f : m_.gguf_files_)  // a name is in one file only (open_gguf_split)
      if (std::optional<TensorView> t = f.find_tensor(name)) return t;
    return std::nullopt;
  }
  bool has(const std::string& name) const { return find(name).has_value(); }

  // "blk.L.<gguf_name>.weight" or "<hf prefix>layers.L.<hf_name>.weight".
  std::string layer_name(int l, const char* gguf_name, const char* hf_name) const {
    return gguf() ? fmt::format("blk.{}.{}.weight", l, gguf_name)
                  : fmt::format("{}layers.{}.{}.weight", hf_prefix_, l, hf_name);
  }
  // "<hf prefix>layers.L." (HF only).
  std::string hf_layer(int l) const { return fmt::format("{}layers.{}.", hf_prefix_, l); }
  // Where the text model's tensors live in an HF checkpoint: "model." (…ForCausalLM) or
  // "model.language_model." (Qwen3.5's …ForConditionalGeneration).
  const std::string& hf_prefix() const { return hf_prefix_; }
  void set_hf_prefix(std::string prefix) { hf_prefix_ = std::move(prefix); }

  TensorView require(const std::string& name, const std::vector<uint64_t>& shape) const {
    auto t = find(name);
    if (!t) {
      fail(where_, "tensor '" + name + "'", "missing (expected shape [{}])",
           fmt::join(shape, ", "));
    }
    if (t->shape != shape) {
      fail(where_, "tensor '" + name + "'", "expected shape [{}], found {}", fmt::join(shape, ", "),
           t->shape_string());
    }
    if (!dtype_converts_to_f32(t->dtype)) {
      fail(where_, "tensor '" + name + "'",
           "expected dtype F32, F16, BF16, F8_E4M3 or a GGUF block type, found {}",
           dtype_name(t->dtype));
    }
    // Block types: rows must be whole blocks (the readers checked the total size already).
    if (dtype_is_quantized(t->dtype) && !t->shape.empty() &&
        t->shape.back() % dtype_block_elements(t->dtype) != 0) {
      fail(where_, "tensor '" + name + "'",
           "rows of {} elements are not a whole number of {} blocks of {}", t->shape.back(),
           dtype_name(t->dtype), dtype_block_elements(t->dtype));
    }
    return *t;
  }

  // A [rows, cols] matrix used in place (F32/F16/BF16) or converted to an owned F32 copy.
  kernels::Matrix matrix(const std::string& name, uint64_t rows, uint64_t cols) {
    return as_matrix(require(name, {rows, cols}), rows, cols, 0);
  }

  // Matrix `index` of a stacked [n, rows, cols] tensor (GGUF experts, fused HF experts).
  // `row_offset` selects rows inside the slice (fused gate_up: gate rows then up rows).
  kernels::Matrix stacked(const TensorView& t, uint64_t index, uint64_t rows, uint64_t cols,
                          uint64_t slice_rows, uint64_t row_offset) {
    const uint64_t first_row = index * slice_rows + row_offset;
    return as_matrix(t, rows, cols, first_row);
  }

  WeightVector vector(const std::string& name, uint64_t n) {
    const TensorView t = require(name, {n});
    if (t.dtype == DType::kF8E4M3) {
      fail(where_, "tensor '" + name + "'", "expected a vector in F32, F16 or BF16, found F8_E4M3");
    }
    WeightVector v;
    static_cast<std::vector<float>&>(v) = t.to_f32();
    v.source_dtype = t.dtype;
    return v;
  }

  // An owned [rows.size(), cols] matrix made of rows `rows` of the [*, cols] tensor `t` (dtype
  // kept for F32/BF16/F16, F32 otherwise): rearranged fused projections.
  kernels::Matrix gather_rows(const TensorView& t, const std::vector<uint64_t>& rows,
                              uint64_t cols) {
    const bool plain = t.dtype == DType::kF32 || t.dtype == DType::kBF16 || t.dtype == DType::kF16;
    kernels::Matrix m;
    m.rows = rows.size();
    m.cols = cols;
    if (plain) {
      const uint64_t row_bytes = cols * dtype_size(t.dtype);
      std::vector<std::byte> out(rows.size() * row_bytes);
      for (size_t i = 0; i < rows.size(); ++i) {
        std::memcpy(&out[i * row_bytes], t.data + rows[i] * row_bytes, row_bytes);
      }
      m.dtype = t.dtype == DType::kF32    ? kernels::DType::kF32
                : t.dtype == DType::kBF16 ? kernels::DType::kBF16
                                          : kernels::DType::kF16;
      m.data = own(std::move(out));
      return m;
    }
    const std::vector<float> all = t.to_f32();
    std::vector<std::byte> out(rows.size() * cols * sizeof(float));
    for (size_t i = 0; i < rows.size(); ++i) {
      std::memcpy(&out[i * cols * sizeof(float)], &all[rows[i] * cols], cols * sizeof(float));
    }
    m.dtype = kernels::DType::kF32;
    m.data = own(std::move(out));
    return m;
  }

  // A tensor of any listed shape as an f32 vector (e.g. HF conv1d [C, 1, K] or GGUF [C, K]).
  WeightVector vector_of_shape(const std::string& name, const std::vector<uint64_t>& shape) {
    const TensorView t = require(name, shape);
    WeightVector v;
    static_cast<std::vector<float>&>(v) = t.to_f32();
    v.source_dtype = t.dtype;
    return v;
  }

  // Takes ownership of rearranged bytes and returns a pointer that stays valid.
  const std::byte* own(std::vector<std::byte> bytes) {
    m_.owned_.push_back(std::move(bytes));
    return m_.owned_.back().data();
  }

 private:
  // FP8 block scales of tensor t ("<name>_scale_inv", f32 or bf16, shape = t's leading dims +
  // [ceil(rows / 128), ceil(cols / 128)]), converted once to an owned, checked f32 copy.
  const float* fp8_scales(const TensorView& t) {
    const auto cached = fp8_scales_.find(t.name);
    if (cached != fp8_scales_.end()) return cached->second;
    const std::string sname = t.name + "_scale_inv";
    const auto s = find(sname);
    if (!s) {
      fail(where_, "tensor '" + t.name + "'",
           "F8_E4M3 weights need block scales '{}' (quantization_config fp8), which are missing",
           sname);
    }
    std::vector<uint64_t> want = t.shape;
    SM_ASSERT(want.size() >= 2);
    const uint64_t b = kernels::kFp8ScaleBlock;
    want[want.size() - 2] = (want[want.size() - 2] + b - 1) / b;
    want.back() = (want.back() + b - 1) / b;
    if (s->shape != want) {
      fail(where_, "tensor '" + sname + "'",
           "expected shape [{}] (128 x 128 blocks of {} {}), found {}", fmt::join(want, ", "),
           t.name, t.shape_string(), s->shape_string());
    }
    if (s->dtype != DType::kF32 && s->dtype != DType::kBF16 && s->dtype != DType::kF16) {
      fail(where_, "tensor '" + sname + "'", "expected dtype F32, BF16 or F16, found {}",
           dtype_name(s->dtype));
    }
    std::vector<std::byte> bytes(s->elements() * sizeof(float));
    auto* f = reinterpret_cast<float*>(bytes.data());
    s->to_f32({f, static_cast<size_t>(s->elements())});
    for (uint64_t i = 0; i < s->elements(); ++i) {
      if (!std::isfinite(f[i])) {
        fail(where_, "tensor '" + sname + "'", "expected finite scales, found {} at element {}",
             f[i], i);
      }
    }
    const auto* p = reinterpret_cast<const float*>(own(std::move(bytes)));
    fp8_scales_[t.name] = p;
    return p;
  }

  kernels::Matrix as_matrix(const TensorView& t, uint64_t rows, uint64_t cols, uint64_t first_row) {
    kernels::Matrix m;
    m.rows = rows;
    m.cols = cols;
    const uint64_t elements = rows * cols;
    const auto row_bytes = dtype_byte_size(t.dtype, cols);
    if (!row_bytes) {
      fail(where_, "tensor '" + t.name + "'", "rows of {} elements cannot be stored as {}", cols,
           dtype_name(t.dtype));
    }
    if (const auto kd = kernel_dtype(t.dtype)) {
      // Used in place, in the stored type (block types and FP8 included).
      m.dtype = *kd;
      m.data = t.data + first_row * *row_bytes;
      if (t.dtype == DType::kF8E4M3) {
        const uint64_t b = kernels::kFp8ScaleBlock;
        const uint64_t total_rows = t.shape.size() >= 2 ? t.shape[t.shape.size() - 2] : rows;
        const uint64_t scale_cols = (cols + b - 1) / b;
        const uint64_t scale_rows_per_slice = (total_rows + b - 1) / b;
        // first_row counts rows across stacked slices: slice s = first_row / total_rows.
        const uint64_t slice = first_row / total_rows;
        const uint64_t in_slice = first_row % total_rows;
        if (in_slice % b != 0) {
          fail(where_, "tensor '" + t.name + "'",
               "F8_E4M3 matrices must start on a 128-row scale block (row {})", in_slice);
        }
        m.scales = fp8_scales(t) + (slice * scale_rows_per_slice + in_slice / b) * scale_cols;
        m.scale_stride = scale_cols;
      }
      return m;
    }
    // Other float types (F64): an owned f32 copy of just these rows.
    std::vector<std::byte> bytes(elements * sizeof(float));
    convert_to_f32(t.dtype,
                   {t.data + first_row * *row_bytes, static_cast<size_t>(rows * *row_bytes)},
                   {reinterpret_cast<float*>(bytes.data()), static_cast<size_t>(elements)}, t.name);
    m.dtype = kernels::DType::kF32;
    m.data = own(std::move(bytes));
    return m;
  }

  Model& m_;
  std::string where_;
  std::string hf_prefix_ = "model.";
  std::map<std::string, const float*> fp8_scales_;
};

}  // namespace steermoe::model
