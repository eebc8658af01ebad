// Opening input files safely: every file steermoe reads (models, text, traces, calibrations,
// profiles, tokenizers) goes through open_input_file or read_input_file, which refuse anything
// but a regular file (a directory, FIFO, socket or device) without blocking, and bound how much
// is read into memory.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

namespace steermoe {

// Identity of an opened file, to detect that it was replaced or changed while in use.
struct FileIdentity {
  uint64_t device = 0;
  uint64_t inode = 0;
  uint64_t size = 0;
  int64_t mtime_ns = 0;
  bool operator==(const FileIdentity&) const = default;
};

// An open read-only file descriptor of a regular file; closes on destruction. Move-only.
class InputFile {
 public:
  InputFile() = default;
  InputFile(InputFile&& other) noexcept;
  InputFile& operator=(InputFile&& other) noexcept;
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;
  ~InputFile();

  int fd() const { return fd_; }
  uint64_t size() const { return identity_.size; }
  const FileIdentity& identity() const { return identity_; }

 private:
  friend InputFile open_input_file(const std::filesystem::path& path, const char* what);
  int fd_ = -1;
  FileIdentity identity_;
};

// Opens `path` for reading. Refuses, with steermoe::Error "<path>: open: expected a regular
// file (<what>), found a directory|FIFO|...", anything that is not a regular file; never blocks
// (the open uses O_NONBLOCK, so a FIFO without a writer cannot hang it). `what` describes the
// expected content ("a model file", "a text file", ...).
InputFile open_input_file(const std::filesystem::path& path, const char* what = "a file");

// The whole content of a regular file, at most `max_bytes` (else an Error naming the limit).
constexpr uint64_t kMaxTextFileBytes = uint64_t{1} << 31;  // 2 GiB of text
constexpr uint64_t kMaxJsonFileBytes = uint64_t{1} << 30;  // 1 GiB of JSON (tokenizers ~10 MB)
std::string read_input_file(const std::filesystem::path& path, const char* what,
                            uint64_t max_bytes = kMaxTextFileBytes);

// Throws unless `path` names a regular file (stat only; follows symlinks). For inputs opened by
// code that does not go through open_input_file.
void require_regular_file(const std::filesystem::path& path, const char* what);

// stat()'s identity of `path` now; nullopt-like {} with inode 0 if it cannot be stat'ed.
FileIdentity file_identity(const std::filesystem::path& path);

}  // namespace steermoe
