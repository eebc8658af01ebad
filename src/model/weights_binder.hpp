// Internal to model/: binds tensors of a Model by name with dtype and shape checks. Shared by
// weights.cpp (common tensors, feed-forward) and the family binders in arch_*.cpp.
#pragma once

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "model/gguf.hpp"
#include "model/safetensors.hpp"
#include "model/weights.hpp"

namespace steermoe::model {

// Looks tensors up by name in the model's file(s) and checks dtype and shape. Knows the names of
// both formats; the family-specific binding lives in arch_gqa.cpp and arch_deepseek.cpp.
class WeightBinder {
 public:
  explicit WeightBinder(Model& model) : m_(model) {}

  bool gguf() const { return m_.format_ == WeightFormat::kGguf; }
  const std::string& where() const { return where_; }
  void set_where(std::string where) { where_ = std::move(where); }

  std::optional<TensorView> find(const std::string& name) const {
    return gguf() ? m_.gguf_->find_tensor(name) : m_.checkpoint_->find_tensor(name);
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
      fail(where_, "tensor '" + name + "'", "expected dtype F32, F16 or BF16, found {}",
           dtype_name(t->dtype));
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
    WeightVector v;
    static_cast<std::vector<float>&>(v) = t.to_f32();
    v.source_dtype = t.dtype;
    return v;
  }

  // An owned [rows.size(), cols] matrix made of rows `rows` of the [*, cols] tensor `t` (dtype
  // kept for F32/BF16/F16, F32 otherwise): rearranged fused projections.
  kernels::Matrix gather_rows(const TensorView& t, const std::vector<uint64_t>& rows,
                              uint64_t cols) {
    const bool plain =
        t.dtype == DType::kF32 || t.dtype == DType::kBF16 || t.dtype == DType::kF16;
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
  kernels::Matrix as_matrix(const TensorView& t, uint64_t rows, uint64_t cols, uint64_t first_row) {
    kernels::Matrix m;
    m.rows = rows;
    m.cols = cols;
    const uint64_t elements = rows * cols;
    if (t.dtype == DType::kF32 || t.dtype == DType::kBF16 || t.dtype == DType::kF16) {
      m.dtype = t.dtype == DType::kF32    ? kernels::DType::kF32
                : t.dtype == DType::kBF16 ? kernels::DType::kBF16
                                          : kernels::DType::kF16;
      m.data = t.data + first_row * cols * dtype_size(t.dtype);
      return m;
    }
    // Other float types (F64, Q8_0): an owned f32 copy of just these rows. A Q8_0 row must be a
    // whole number of 32-element blocks, otherwise rows cannot be addressed.
    const auto row_bytes = dtype_byte_size(t.dtype, cols);
    if (!row_bytes) {
      fail(where_, "tensor '" + t.name + "'", "rows of {} elements cannot be stored as {}", cols,
           dtype_name(t.dtype));
    }
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
};

// Family binders (arch_gqa.cpp, arch_deepseek.cpp).
void bind_gqa_attention(WeightBinder& b, const ModelConfig& c, int layer, LayerWeights& w);
void bind_mla_attention(WeightBinder& b, const ModelConfig& c, int layer, LayerWeights& w);
// Gated DeltaNet layer of the hybrid families (arch_qwen35.cpp).
void bind_linear_attention(WeightBinder& b, const ModelConfig& c, int layer, LinearAttnWeights& w);
// Row order of Qwen3-Next's fused projections: rows of in_proj_qkvz [q | k | v | z per key
// head] that make q | k | v (first) and z (second), and rows of in_proj_ba [b | a per key head]
// that make b and a. Shared with the writer (weights_sources.cpp).
struct FusedRows {
  std::vector<uint64_t> qkv, z, b, a;
};
FusedRows qwen3next_fused_rows(const LinearAttnConfig& a);

}  // namespace steermoe::model
