#include "trace/mapped_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/error.hpp"
#include "common/input_file.hpp"
#include "common/mapped_ranges.hpp"

namespace steermoe::trace {

MappedFile::MappedFile(const std::filesystem::path& path) : path_(path.string()) {
  // Refuses directories, FIFOs and devices without blocking (common/input_file.hpp).
  const InputFile input = open_input_file(path, "a trace or calibration file");
  size_ = static_cast<size_t>(input.size());
  if (size_ > 0) {
    void* mapped = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, input.fd(), 0);
    if (mapped == MAP_FAILED) {
      fail(path_, "mmap", "cannot map {} bytes ({})", size_, std::strerror(errno));
    }
    mapping_ = mapped;
    data_ = static_cast<const uint8_t*>(mapped);
    // A fault on a page the file lost while mapped exits cleanly naming it.
    register_mapped_range(mapping_, size_, path_);
  }
}

MappedFile::~MappedFile() {
  if (mapping_ != nullptr) {
    unregister_mapped_range(mapping_);
    ::munmap(mapping_, size_);
  }
}

}  // namespace steermoe::trace
