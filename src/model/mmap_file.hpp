// Read-only memory-mapped files (weights are used in place, never copied) and a buffered,
// atomically committed output file used by the GGUF and safetensors writers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "common/input_file.hpp"

namespace steermoe::model {

// A whole file mapped read-only (PROT_READ, MAP_PRIVATE). Move-only; unmaps on destruction.
// An empty file maps to an empty span (data() == nullptr, size() == 0).
class MappedFile {
 public:
  MappedFile() = default;
  // Throws steermoe::Error "<path>: open: <reason>" if the file cannot be opened or mapped.
  static MappedFile open(const std::filesystem::path& path);

  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const std::byte* data() const { return data_; }
  uint64_t size() const { return size_; }
  std::span<const std::byte> bytes() const { return {data_, static_cast<size_t>(size_)}; }
  const std::filesystem::path& path() const { return path_; }
  bool is_open() const { return data_ != nullptr || !path_.empty(); }

  // Throws steermoe::Error naming the file if it changed (size or mtime) since it was opened.
  // A fault reading a page the file lost while mapped exits cleanly (common/mapped_ranges.hpp).
  void check_unchanged() const;

  // Hint that a byte range will be read soon (madvise WILLNEED); a no-op for bad ranges.
  void prefetch(uint64_t offset, uint64_t length) const;

 private:
  void release() noexcept;

  const std::byte* data_ = nullptr;
  uint64_t size_ = 0;
  std::filesystem::path path_;
  FileIdentity identity_;
};

// Sequential writer to `<path>.tmp`, renamed onto `path` by commit(); if the object is destroyed
// without commit() the temporary file is removed, so a failed conversion never leaves a
// half-written weight file under the final name. Buffered; counts the bytes written.
// I/O failures throw steermoe::Error "<path>: write: <reason>".
class OutputFile {
 public:
  explicit OutputFile(std::filesystem::path path);
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;
  ~OutputFile();

  void write(std::span<const std::byte> bytes);
  void write(const void* data, size_t size) {
    write(std::span<const std::byte>(static_cast<const std::byte*>(data), size));
  }
  void write_zeros(uint64_t count);
  uint64_t position() const { return written_; }
  const std::filesystem::path& path() const { return path_; }
  // Flushes, fsyncs, closes and renames the temporary file onto path().
  void commit();

 private:
  void flush_buffer();

  std::filesystem::path path_;
  std::filesystem::path tmp_path_;
  int fd_ = -1;
  std::vector<std::byte> buffer_;
  uint64_t written_ = 0;
  bool committed_ = false;
};

// Produces the bytes of one tensor while a writer streams the file: it must call
// out.write(...) with exactly the tensor's byte size in total (the writer checks). This lets a
// converter read, convert and write one tensor (or one row) at a time instead of holding a
// multi-GB model in memory.
using TensorBytesFn = std::function<void(OutputFile& out)>;

}  // namespace steermoe::model
