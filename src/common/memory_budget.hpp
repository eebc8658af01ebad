// A real memory budget for one process (`--mem-limit`): the process moves itself into a child
// memory cgroup of its own with that limit, so that everything it makes resident counts, page
// cache included, exactly as on a machine with that little RAM. cgroup v2 (memory.max,
// memory.peak) and the v1 memory controller (memory.limit_in_bytes, memory.max_usage_in_bytes)
// are both handled. Without write access to the cgroup tree it is an error that says how to
// impose the budget from outside (systemd-run -p MemoryMax=...).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace steermoe {

// Parses a byte count: "3000000000", "3G", "2.5GiB", "512M", "800MB" (K/M/G/T are powers of
// 1024, KB/MB/GB/TB of 1000). Throws Error naming `flag` on anything else or on 0.
uint64_t parse_byte_count(const std::string& text, const std::string& flag);

class MemoryBudget {
 public:
  // Moves this process into a new cgroup limited to `bytes` below its current one. Throws
  // steermoe::Error ("--mem-limit", ...) when that is impossible.
  static MemoryBudget enter(uint64_t bytes);
  MemoryBudget(MemoryBudget&& other) noexcept;
  MemoryBudget& operator=(MemoryBudget&&) = delete;
  MemoryBudget(const MemoryBudget&) = delete;
  ~MemoryBudget();  // moves the process back and removes the cgroup

  uint64_t limit_bytes() const { return limit_; }
  // Highest memory the cgroup charged (RSS + page cache) since enter(); nullopt when the kernel
  // does not report it.
  std::optional<uint64_t> peak_bytes() const;
  std::optional<uint64_t> usage_bytes() const;
  const std::string& path() const { return dir_; }

 private:
  MemoryBudget() = default;
  std::string dir_;     // the cgroup's folder (empty once moved from)
  std::string parent_;  // the cgroup the process came from
  bool v2_ = false;
  uint64_t limit_ = 0;
};

// Bytes of the file at `path` the page cache holds now (mincore over a mapping that touches
// nothing); 0 when it cannot be read. A page another cgroup read first stays charged there, so
// what is cached before a budget is entered does not count against it.
uint64_t cached_file_bytes(const std::string& path);

// This process's peak resident set size (getrusage), bytes.
uint64_t peak_rss_bytes();

}  // namespace steermoe
