#include "common/mapped_file.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <system_error>
#include <utility>

#include "common/error.hpp"
#include "common/huge_pages.hpp"
#include "common/mapped_ranges.hpp"

namespace steermoe {

namespace {

std::string errno_text(int error) {
  return std::generic_category().message(error);
}

}  // namespace

MappedFile MappedFile::open(const std::filesystem::path& path, const char* what) {
  const std::string where = path.string();
  // Refuses directories, FIFOs and devices without blocking (common/input_file.hpp).
  const InputFile input = open_input_file(path, what);
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
    fail(path_.string(), "file",
         "the file changed while being loaded ({} bytes when opened, {} "
         "now); expected it unchanged while in use",
         identity_.size, now.size);
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

uint64_t MappedFile::promote_to_huge_pages(uint64_t offset, uint64_t length) {
  constexpr auto kHuge = static_cast<uintptr_t>(kHugePageBytes);
  if (data_ == nullptr || offset >= size_ || length == 0) return 0;
  length = std::min(length, size_ - offset);
  const auto begin = reinterpret_cast<uintptr_t>(data_) + offset;
  const uintptr_t first = (begin + kHuge - 1) / kHuge * kHuge;
  const uintptr_t last = (begin + length) / kHuge * kHuge;
  if (last <= first) return 0;
  // One window at a time through a bounce buffer: the file's bytes, then an anonymous mapping
  // over the same addresses (MAP_FIXED replaces those pages of the file mapping), then the
  // bytes back and the window made read-only again.
  std::unique_ptr<std::byte[]> bounce(new std::byte[kHuge]);
  uint64_t moved = 0;
  for (uintptr_t at = first; at < last; at += kHuge) {
    auto* window = reinterpret_cast<std::byte*>(at);
    std::memcpy(bounce.get(), window, kHuge);
    void* p = ::mmap(window, kHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
                     -1, 0);
    if (p == MAP_FAILED) {
      // A failed MAP_FIXED may already have unmapped the window: stop here, naming the file,
      // rather than leave a hole a later read would fault on.
      fail(path_.string(), "mapping",
           "cannot remap 2 MiB of the weights at offset {} into anonymous memory ({}); expected "
           "the memory for it (vm.max_map_count, RLIMIT_AS)",
           at - reinterpret_cast<uintptr_t>(data_), errno_text(errno));
    }
    ::madvise(window, kHuge, MADV_HUGEPAGE);
    std::memcpy(window, bounce.get(), kHuge);
    ::mprotect(window, kHuge, PROT_READ);
    moved += kHuge;
  }
  return moved;
}

}  // namespace steermoe
