#include "model/mmap_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <system_error>
#include <utility>

#include "common/error.hpp"
#include "common/input_file.hpp"
#include "common/mapped_ranges.hpp"

namespace steermoe::model {
namespace {

std::string errno_text(int error) {
  return std::generic_category().message(error);
}

// Closes a file descriptor on scope exit.
struct FdGuard {
  int fd;
  ~FdGuard() {
    if (fd >= 0) ::close(fd);
  }
};

constexpr size_t kOutputBufferBytes = size_t{4} << 20;

}  // namespace

MappedFile MappedFile::open(const std::filesystem::path& path) {
  const std::string where = path.string();
  // Refuses directories, FIFOs and devices without blocking (common/input_file.hpp).
  const InputFile input = open_input_file(path, "a model or data file");
  MappedFile file;
  file.path_ = path;
  file.size_ = input.size();
  file.identity_ = input.identity();
  if (file.size_ == 0) return file;  // mmap of length 0 is invalid; an empty view is enough
  void* p = ::mmap(nullptr, static_cast<size_t>(file.size_), PROT_READ, MAP_PRIVATE, input.fd(), 0);
  if (p == MAP_FAILED)
    fail(where, "open", "cannot mmap {} bytes ({})", file.size_, errno_text(errno));
  file.data_ = static_cast<const std::byte*>(p);
  // A read of a page the file no longer has (truncated while mapped) becomes a clean error exit
  // naming the file instead of a SIGBUS death (common/mapped_ranges.hpp).
  register_mapped_range(file.data_, static_cast<size_t>(file.size_), where);
  return file;
}

void MappedFile::check_unchanged() const {
  if (path_.empty()) return;
  const FileIdentity now = file_identity(path_);
  if (now.inode == 0) return;  // removed: the mapping keeps the old inode alive and valid
  if (now.device == identity_.device && now.inode == identity_.inode &&
      (now.size != identity_.size || now.mtime_ns != identity_.mtime_ns)) {
    fail(path_.string(), "file", "the file changed while being loaded ({} bytes when opened, {} "
         "now); expected it unchanged while in use", identity_.size, now.size);
  }
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      path_(std::move(other.path_)),
      identity_(other.identity_) {
  other.path_.clear();
}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    path_ = std::move(other.path_);
    identity_ = other.identity_;
    other.path_.clear();
  }
  return *this;
}

MappedFile::~MappedFile() {
  release();
}

void MappedFile::release() noexcept {
  if (data_ != nullptr) unregister_mapped_range(data_);
  if (data_ != nullptr) ::munmap(const_cast<std::byte*>(data_), static_cast<size_t>(size_));
  data_ = nullptr;
  size_ = 0;
}

void MappedFile::prefetch(uint64_t offset, uint64_t length) const {
  if (data_ == nullptr || offset >= size_ || length == 0) return;
  length = std::min(length, size_ - offset);
  // madvise needs a page-aligned start.
  const auto page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const uint64_t start = offset / page * page;
  ::madvise(const_cast<std::byte*>(data_) + start, static_cast<size_t>(offset + length - start),
            MADV_WILLNEED);
}

OutputFile::OutputFile(std::filesystem::path path)
    : path_(std::move(path)), tmp_path_(path_.string() + ".tmp") {
  fd_ = ::open(tmp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    fail(path_.string(), "write", "cannot create {} ({})", tmp_path_.string(), errno_text(errno));
  }
  buffer_.reserve(kOutputBufferBytes);
}

OutputFile::~OutputFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) {
    std::error_code ignored;
    std::filesystem::remove(tmp_path_, ignored);
  }
}

void OutputFile::write(std::span<const std::byte> bytes) {
  SM_ASSERT_MSG(fd_ >= 0, "OutputFile written after commit");
  if (buffer_.size() + bytes.size() > kOutputBufferBytes) flush_buffer();
  if (bytes.size() >= kOutputBufferBytes) {
    // Large spans (whole tensors) skip the buffer.
    size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n = ::write(fd_, bytes.data() + done, bytes.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) fail(path_.string(), "write", "write failed ({})", errno_text(errno));
      done += static_cast<size_t>(n);
    }
  } else {
    buffer_.insert(buffer_.end(), bytes.begin(), bytes.end());
  }
  written_ += bytes.size();
}

void OutputFile::write_zeros(uint64_t count) {
  static constexpr std::byte kZeros[256] = {};
  while (count > 0) {
    const uint64_t n = std::min<uint64_t>(count, sizeof kZeros);
    write(std::span<const std::byte>(kZeros, static_cast<size_t>(n)));
    count -= n;
  }
}

void OutputFile::flush_buffer() {
  size_t done = 0;
  while (done < buffer_.size()) {
    const ssize_t n = ::write(fd_, buffer_.data() + done, buffer_.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail(path_.string(), "write", "write failed ({})", errno_text(errno));
    done += static_cast<size_t>(n);
  }
  buffer_.clear();
}

void OutputFile::commit() {
  SM_ASSERT_MSG(fd_ >= 0, "OutputFile committed twice");
  flush_buffer();
  if (::fsync(fd_) != 0) fail(path_.string(), "write", "fsync failed ({})", errno_text(errno));
  const int fd = std::exchange(fd_, -1);
  if (::close(fd) != 0) fail(path_.string(), "write", "close failed ({})", errno_text(errno));
  std::error_code error;
  std::filesystem::rename(tmp_path_, path_, error);
  if (error)
    fail(path_.string(), "write", "cannot rename {} ({})", tmp_path_.string(), error.message());
  committed_ = true;
}

}  // namespace steermoe::model
