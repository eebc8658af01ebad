#include "common/huge_pages.hpp"

#include <sys/mman.h>

#include <cstdlib>

namespace steermoe {

std::byte* allocate_huge_pages(uint64_t bytes) {
  const uint64_t rounded = (bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  if (rounded == 0) return nullptr;
  auto* p = static_cast<std::byte*>(std::aligned_alloc(kHugePageBytes, rounded));
  if (p != nullptr) ::madvise(p, rounded, MADV_HUGEPAGE);
  return p;
}

}  // namespace steermoe
