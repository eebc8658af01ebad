#include "common/memory_limit.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdlib>
#include <limits>

#include "common/error.hpp"

namespace steermoe {

uint64_t allocation_cap_bytes() {
  if (const char* env = std::getenv("STEERMOE_MAX_ALLOC_BYTES"); env != nullptr && *env != 0) {
    char* end = nullptr;
    const unsigned long long v = std::strtoull(env, &end, 10);
    if (end != env && *end == 0 && v > 0) return static_cast<uint64_t>(v);
  }
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page = ::sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return std::numeric_limits<uint64_t>::max();
  return saturating_mul(static_cast<uint64_t>(pages), static_cast<uint64_t>(page));
}

uint64_t saturating_mul(uint64_t a, uint64_t b) {
  if (a != 0 && b > std::numeric_limits<uint64_t>::max() / a)
    return std::numeric_limits<uint64_t>::max();
  return a * b;
}

std::string bytes_text(uint64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (bytes >= (uint64_t{1} << 40)) return fmt::format("{:.1f} TiB", b / 1099511627776.0);
  if (bytes >= (uint64_t{1} << 30)) return fmt::format("{:.1f} GiB", b / 1073741824.0);
  if (bytes >= (uint64_t{1} << 20)) return fmt::format("{:.1f} MiB", b / 1048576.0);
  if (bytes >= (uint64_t{1} << 10)) return fmt::format("{:.1f} KiB", b / 1024.0);
  return fmt::format("{} bytes", bytes);
}

void check_allocation(const std::string& where, const std::string& field, uint64_t bytes,
                      const std::string& what, const std::string& hint) {
  const uint64_t cap = allocation_cap_bytes();
  if (bytes <= cap) return;
  fail(where, field, "{} needs {}{}, more than the {} of memory available; {}", what,
       bytes == std::numeric_limits<uint64_t>::max() ? std::string("more than 16 EiB")
                                                     : bytes_text(bytes),
       bytes == std::numeric_limits<uint64_t>::max() ? std::string()
                                                     : fmt::format(" ({} bytes)", bytes),
       bytes_text(cap), hint);
}

}  // namespace steermoe
