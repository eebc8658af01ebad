// Memory in 2 MiB pages where the kernel gives them: transparent huge pages asked for with
// madvise (this project's machines give them only on request). Weights are streamed once per
// token, and with 4 KiB pages every page costs a TLB miss and a page walk; the slot arenas, the
// resident experts' arena, the promoted non-expert windows (MappedFile::promote_to_huge_pages)
// and the benchmarks' read floor all live in such pages.
#pragma once

#include <cstddef>
#include <cstdint>

namespace steermoe {

inline constexpr uint64_t kHugePageBytes = uint64_t{2} << 20;

// `bytes` rounded up to whole huge pages, 2 MiB aligned, asked for huge pages (ignored where
// the kernel has none); release with std::free. nullptr when the allocation fails.
std::byte* allocate_huge_pages(uint64_t bytes);

}  // namespace steermoe
