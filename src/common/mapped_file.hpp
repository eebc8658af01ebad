// A whole file mapped read-only: model weights are used in place, never copied, and traces
// (which can be gigabytes) are mapped instead of read in; the pages are shared with the page
// cache and touched only when used. A fault on a page the file lost while mapped exits cleanly
// naming the file (mapped_ranges.hpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>

#include "common/input_file.hpp"

namespace steermoe {

// A whole file mapped read-only (PROT_READ, MAP_PRIVATE). Move-only; unmaps on destruction.
// An empty file maps to an empty span (data() == nullptr, size() == 0).
class MappedFile {
 public:
  MappedFile() = default;
  // Throws steermoe::Error "<path>: open: <reason>" if the file cannot be opened or mapped;
  // `what` describes the expected file in that message.
  static MappedFile open(const std::filesystem::path& path,
                         const char* what = "a model or data file");

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

  // The whole 2 MiB-aligned windows of [offset, offset + length) become anonymous memory in
  // 2 MiB pages (transparent huge pages on request) holding the same bytes at the same
  // addresses, read-only: what the page cache would serve in 4 KiB pages, which cost compute
  // that streams weights more TLB misses. Views into the mapping stay valid. The bytes are read
  // now (the file's pages are faulted in once) and are no longer reclaimable page cache; a
  // window the kernel will not remap stays file-backed. Returns the bytes moved.
  uint64_t promote_to_huge_pages(uint64_t offset, uint64_t length);

 private:
  void release() noexcept;

  const std::byte* data_ = nullptr;
  uint64_t size_ = 0;
  std::filesystem::path path_;
  FileIdentity identity_;
};

}  // namespace steermoe
