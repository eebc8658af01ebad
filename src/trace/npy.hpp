// numpy `.npy` files: header parsing and writing (format versions 1.0, 2.0 and 3.0), typed
// read-only views (memory-mapped), whole-array writes and a streaming writer whose first
// dimension grows as rows are appended (the header gets the final shape at close).
// Only little-endian, C-order arrays of the dtypes below are accepted; anything else is rejected
// with a message naming the file, the header field and what was expected.
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "common/mapped_file.hpp"

namespace steermoe::trace {

enum class DType : uint8_t { kF32, kI32, kI64 };

// "<f4", "<i4", "<i8".
const char* dtype_descr(DType dtype);
size_t dtype_size(DType dtype);
template <typename T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() {
  return DType::kF32;
}
template <>
constexpr DType dtype_of<int32_t>() {
  return DType::kI32;
}
template <>
constexpr DType dtype_of<int64_t>() {
  return DType::kI64;
}

struct NpyHeader {
  int major_version = 1;
  DType dtype = DType::kF32;
  std::vector<uint64_t> shape;  // empty = a scalar (one element)
  size_t data_offset = 0;       // bytes from the start of the file to the first element
  uint64_t element_count() const;
  uint64_t data_bytes() const { return element_count() * dtype_size(dtype); }
};

// Parses and validates the header of a whole `.npy` file held in `file` (data included, so the
// data size can be checked against the shape). `where` names the file in messages.
NpyHeader parse_npy_header(std::span<const uint8_t> file, const std::string& where);

// The header bytes (magic, version 1.0, padded dict) of an array; `min_total` pads the header to
// at least that many bytes (the streaming writer reserves a fixed size). The total is a multiple
// of 64 so the data is aligned.
std::vector<uint8_t> encode_npy_header(DType dtype, std::span<const uint64_t> shape,
                                       size_t min_total = 0);

// A validated, read-only `.npy` array: memory-mapped from a file or held in memory. Cheap to
// move; element data stays valid as long as the array lives.
class NpyArray {
 public:
  NpyArray() = default;
  // Maps `path` and validates its header; throws when the dtype is not one of `accepted`.
  static NpyArray open(const std::filesystem::path& path, std::initializer_list<DType> accepted);
  // The same from bytes in memory (tests, fuzzing); `where` names the input.
  static NpyArray from_bytes(std::vector<uint8_t> bytes, const std::string& where,
                             std::initializer_list<DType> accepted);

  const NpyHeader& header() const { return header_; }
  DType dtype() const { return header_.dtype; }
  const std::vector<uint64_t>& shape() const { return header_.shape; }
  uint64_t size() const { return header_.element_count(); }
  const std::string& where() const { return where_; }

  template <typename T>
  std::span<const T> values() const {
    SM_ASSERT(dtype_of<T>() == header_.dtype);
    return {reinterpret_cast<const T*>(data_), static_cast<size_t>(size())};
  }

  // Throws "<where>: shape: expected [..], found [..]" unless the shape is exactly `expected`.
  void expect_shape(std::span<const uint64_t> expected) const;

 private:
  void adopt(std::span<const uint8_t> file, const std::string& where,
             std::initializer_list<DType> accepted);

  std::shared_ptr<const MappedFile> mapped_;
  std::vector<uint8_t> owned_;          // file bytes when read from memory
  std::vector<uint64_t> aligned_copy_;  // element data copied when the mapping is misaligned
  const uint8_t* data_ = nullptr;
  NpyHeader header_;
  std::string where_;
};

// Writes a whole array (C order, little-endian); throws naming the file on I/O errors.
void write_npy(const std::filesystem::path& path, DType dtype, std::span<const uint64_t> shape,
               const void* data, size_t bytes);
template <typename T>
void write_npy(const std::filesystem::path& path, std::span<const T> values,
               std::span<const uint64_t> shape) {
  write_npy(path, dtype_of<T>(), shape, values.data(), values.size_bytes());
}

// Appends rows of shape `row_shape` to a `.npy` file; the header is rewritten with the final row
// count by close() (or the destructor, which swallows errors: call close() to see them).
class NpyStreamWriter {
 public:
  NpyStreamWriter(const std::filesystem::path& path, DType dtype, std::vector<uint64_t> row_shape);
  ~NpyStreamWriter();
  NpyStreamWriter(const NpyStreamWriter&) = delete;
  NpyStreamWriter& operator=(const NpyStreamWriter&) = delete;

  // Appends `count` whole rows (count * row elements values of the writer's dtype).
  void append_rows(const void* data, uint64_t count);
  template <typename T>
  void append(std::span<const T> values) {
    SM_ASSERT(dtype_of<T>() == dtype_);
    SM_ASSERT(row_elements_ > 0 && values.size() % row_elements_ == 0);
    append_rows(values.data(), values.size() / row_elements_);
  }
  uint64_t rows() const { return rows_; }
  void close();

 private:
  std::string path_;
  DType dtype_;
  std::vector<uint64_t> row_shape_;
  uint64_t row_elements_ = 1;
  uint64_t rows_ = 0;
  std::FILE* file_ = nullptr;
};

}  // namespace steermoe::trace
