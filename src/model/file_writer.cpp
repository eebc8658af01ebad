#include "model/file_writer.hpp"

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

namespace steermoe::model {
namespace {

std::string errno_text(int error) {
  return std::generic_category().message(error);
}

constexpr size_t kOutputBufferBytes = size_t{4} << 20;

}  // namespace

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
