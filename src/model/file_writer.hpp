// The buffered, atomically committed output file the GGUF and safetensors writers stream into.
// (Weights are read in place through steermoe::MappedFile, common/mapped_file.hpp.)
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "common/mapped_file.hpp"

namespace steermoe::model {

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
