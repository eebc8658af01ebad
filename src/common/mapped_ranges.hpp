// A process-wide registry of read-only file mappings and a SIGBUS handler over it.
//
// Weights and traces are used in place from mmap. If the file shrinks (truncated, or replaced
// by a shorter copy through the same inode) while it is mapped, the next read of a page past
// the new end raises SIGBUS. The handler installed by register_mapped_range looks the faulting
// address up in the registry and, when it lies in a registered mapping, writes
//   steermoe: error: <file>: the file changed or shrank while mapped (read fault at offset N);
//   expected it unchanged while in use
// with write(2) and exits with status 1 (_exit: no destructors run, no partial output file is
// committed). A SIGBUS outside every registered range gets the default action (core dump).
//
// The registry is a fixed table of kMaxMappedRanges slots read lock-free by the handler
// (async-signal-safe); registration beyond that many live mappings is accepted but unguarded.
#pragma once

#include <cstddef>
#include <string>

namespace steermoe {

constexpr size_t kMaxMappedRanges = 1024;

// Registers [base, base + length) as a mapping of `path`; installs the handler on first use.
void register_mapped_range(const void* base, size_t length, const std::string& path);
// Removes the mapping starting at `base` (call before munmap). Unknown bases are ignored.
void unregister_mapped_range(const void* base);

}  // namespace steermoe
