#include "common/input_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "common/error.hpp"

namespace steermoe {
namespace {

const char* kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "not a regular file";
}

FileIdentity identity_of(const struct stat& st) {
  return {.device = static_cast<uint64_t>(st.st_dev),
          .inode = static_cast<uint64_t>(st.st_ino),
          .size = static_cast<uint64_t>(st.st_size),
          .mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec};
}

}  // namespace

InputFile::InputFile(InputFile&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), identity_(other.identity_) {}

InputFile& InputFile::operator=(InputFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    identity_ = other.identity_;
  }
  return *this;
}

InputFile::~InputFile() {
  if (fd_ >= 0) ::close(fd_);
}

void require_regular_file(const std::filesystem::path& path, const char* what) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    fail(path.string(), "open", "cannot open {} ({})", what, std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) {
    fail(path.string(), "open", "expected a regular file ({}), found {}", what,
         kind_of(st.st_mode));
  }
}

InputFile open_input_file(const std::filesystem::path& path, const char* what) {
  // stat first: a FIFO or device is refused before open() could block or have side effects.
  require_regular_file(path, what);
  // O_NONBLOCK: if the path was swapped for a FIFO after the stat, open still returns at once.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) fail(path.string(), "open", "cannot open {} ({})", what, std::strerror(errno));
  InputFile file;
  file.fd_ = fd;
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    fail(path.string(), "open", "cannot stat {} ({})", what, std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) {
    fail(path.string(), "open", "expected a regular file ({}), found {}", what,
         kind_of(st.st_mode));
  }
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  file.identity_ = identity_of(st);
  return file;
}

std::string read_input_file(const std::filesystem::path& path, const char* what,
                            uint64_t max_bytes) {
  const InputFile file = open_input_file(path, what);
  if (file.size() > max_bytes) {
    fail(path.string(), "size", "expected {} of at most {} bytes, found {} bytes", what, max_bytes,
         file.size());
  }
  std::string text(static_cast<size_t>(file.size()), '\0');
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::read(file.fd(), text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail(path.string(), "read", "cannot read {} ({})", what, std::strerror(errno));
    if (n == 0) break;  // shrank while reading: keep what was there
    done += static_cast<size_t>(n);
  }
  text.resize(done);
  return text;
}

FileIdentity file_identity(const std::filesystem::path& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return {};
  return identity_of(st);
}

}  // namespace steermoe
