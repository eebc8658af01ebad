// Element types of weight tensors, the tensor view shared by the GGUF and safetensors readers,
// and scalar float conversions (f16 / bf16 <-> f32).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace steermoe::model {

// Every element type a weight file may hold. Plain types have a fixed byte size per element;
// block-quantized types (Q8_0) store `block_elements` elements in `block_bytes` bytes.
enum class DType : uint8_t {
  kF32,
  kF16,
  kBF16,
  kF64,
  kI8,
  kI16,
  kI32,
  kI64,
  kU8,
  kU16,
  kU32,
  kU64,
  kBool,
  kF8E4M3,  // safetensors "F8_E4M3" (parsed, not converted)
  kF8E5M2,  // safetensors "F8_E5M2" (parsed, not converted)
  kQ8_0,    // ggml Q8_0: blocks of 32 int8 with one f16 scale (34 bytes per block)
  kQ4_0,    // ggml block types (byte layouts in quant/quant.hpp); GGUF only
  kQ4_1,
  kQ5_0,
  kQ5_1,
  kQ4_K,
  kQ5_K,
  kQ6_K,
  kQ2_K,  // after Q6_K: the block types keep quant::Type's order
  kQ3_K,
};

// True for the ggml block types (Q8_0 .. Q6_K).
bool dtype_is_quantized(DType dtype);

// Upper-case name as safetensors writes it ("F32", "BF16", "I64", "BOOL", "F8_E4M3"); Q8_0 is
// "Q8_0" (GGUF only).
std::string_view dtype_name(DType dtype);
// Parses a safetensors dtype string; nullopt for unknown names (and for "Q8_0").
std::optional<DType> dtype_from_safetensors_name(std::string_view name);

// Elements per block (1 for plain types, 32 for Q8_0) and bytes per block.
uint64_t dtype_block_elements(DType dtype);
uint64_t dtype_block_bytes(DType dtype);
// Bytes of one element for plain types; SM_ASSERTs that dtype is not block-quantized.
uint64_t dtype_size(DType dtype);
// Bytes needed for `elements` elements: nullopt if that overflows uint64 or (for block types)
// `elements` is not a whole number of blocks.
std::optional<uint64_t> dtype_byte_size(DType dtype, uint64_t elements);
// True for the types convert_to_f32 understands: F32, F16, BF16, F64, the block types, and
// F8_E4M3 (raw values: its block scales live in a separate tensor).
bool dtype_converts_to_f32(DType dtype);

// Scalar conversions. f32 -> bf16 / f16 round to nearest, ties to even; NaN stays NaN (quiet),
// +-inf stays inf, f16 overflow gives inf, f16 underflow gives (signed) subnormals or zero.
float bf16_to_f32(uint16_t bits);
uint16_t f32_to_bf16(float value);
float f16_to_f32(uint16_t bits);
uint16_t f32_to_f16(float value);

// Converts `src` (raw bytes of `count` elements of `dtype`, any alignment, little-endian) into
// `dst` (dst.size() == count). Throws steermoe::Error naming `what` if the dtype cannot be
// converted or the sizes disagree.
void convert_to_f32(DType dtype, std::span<const std::byte> src, std::span<float> dst,
                    std::string_view what = "tensor");
// Encodes f32 values as F32, F16, BF16 or a block type (quant::quantize_row) into `dst`
// (dst.size() == dtype_byte_size(dtype, src.size())). Throws steermoe::Error otherwise.
void convert_from_f32(DType dtype, std::span<const float> src, std::span<std::byte> dst,
                      std::string_view what = "tensor");

// A tensor inside a mapped weight file (GGUF or safetensors). Does not own the bytes: valid as
// long as the file object it came from lives.
//
// Shape convention: row-major, outermost dimension first, as HuggingFace / PyTorch / safetensors
// write it: a linear layer with `in` inputs and `out` outputs is [out, in] and element (r, c) is
// at r * in + c. GGUF stores dimensions innermost first (ne[0] is the contiguous one), so the
// GGUF reader reports shape = reversed(ne): GGUF ne = [in, out] becomes shape [out, in]. The
// bytes are identical; only the order of the dimension list differs.
struct TensorView {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<uint64_t> shape;      // row-major, outermost first; empty = scalar (1 element)
  const std::byte* data = nullptr;  // first byte of the tensor (alignment not guaranteed)
  uint64_t nbytes = 0;              // == dtype_byte_size(dtype, elements())

  uint64_t elements() const;  // product of shape (1 for a scalar)
  std::span<const std::byte> bytes() const { return {data, static_cast<size_t>(nbytes)}; }
  // "[300, 64]"
  std::string shape_string() const;
  // Copies the tensor into f32 (any alignment; F32, F16, BF16, F64, Q8_0).
  std::vector<float> to_f32() const;
  void to_f32(std::span<float> dst) const;
};

}  // namespace steermoe::model
