// A read-only memory mapping of a whole file. Traces can be gigabytes, so the trace readers map
// them instead of reading them in; the pages are shared with the page cache and only touched
// when a step is replayed. Kept here (not in src/model) so the trace library stays light.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>

namespace steermoe::trace {

class MappedFile {
 public:
  // Maps `path` read-only; throws steermoe::Error naming the file when it cannot be opened or
  // mapped. An empty file maps to an empty span.
  explicit MappedFile(const std::filesystem::path& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  void* mapping_ = nullptr;  // what munmap needs (null for an empty file)
};

}  // namespace steermoe::trace
