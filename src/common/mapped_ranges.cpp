#include "common/mapped_ranges.hpp"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <mutex>

namespace steermoe {
namespace {

constexpr size_t kPathChars = 1024;

struct Slot {
  std::atomic<uintptr_t> base{0};  // 0: free; published last (release), cleared first
  std::atomic<size_t> length{0};
  char path[kPathChars] = {};
};

Slot g_slots[kMaxMappedRanges];
std::mutex g_mutex;  // serialises writers; the handler only reads
std::once_flag g_install_once;

void write_all(const char* s, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(STDERR_FILENO, s, n);
    if (w <= 0) return;
    s += w;
    n -= static_cast<size_t>(w);
  }
}

void write_str(const char* s) {
  write_all(s, std::strlen(s));
}

void write_u64(uint64_t v) {
  char buf[24];
  size_t i = sizeof buf;
  do {
    buf[--i] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v != 0);
  write_all(buf + i, sizeof buf - i);
}

void on_sigbus(int sig, siginfo_t* info, void* /*context*/) {
  const auto addr = reinterpret_cast<uintptr_t>(info != nullptr ? info->si_addr : nullptr);
  if (info != nullptr && info->si_code > 0) {  // raised by the kernel for a memory access
    for (Slot& slot : g_slots) {
      const uintptr_t base = slot.base.load(std::memory_order_acquire);
      if (base == 0) continue;
      const size_t length = slot.length.load(std::memory_order_relaxed);
      if (addr >= base && addr - base < length) {
        write_str("steermoe: error: ");
        write_str(slot.path);
        write_str(": the file changed or shrank while mapped (read fault at offset ");
        write_u64(addr - base);
        write_str("); expected it unchanged while in use\n");
        ::_exit(1);
      }
    }
  }
  // Not ours: the default action (returning re-executes the faulting access, which then kills
  // the process with SIGBUS; a sent signal is raised again).
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  ::sigaction(sig, &dfl, nullptr);
  if (info == nullptr || info->si_code <= 0) ::raise(sig);
}

void install_handler() {
  struct sigaction sa {};
  sa.sa_sigaction = on_sigbus;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGBUS, &sa, nullptr);
}

}  // namespace

void register_mapped_range(const void* base, size_t length, const std::string& path) {
  if (base == nullptr || length == 0) return;
  std::call_once(g_install_once, install_handler);
  const std::lock_guard<std::mutex> lock(g_mutex);
  for (Slot& slot : g_slots) {
    if (slot.base.load(std::memory_order_relaxed) != 0) continue;
    const size_t n = std::min(path.size(), kPathChars - 1);
    std::memcpy(slot.path, path.data(), n);
    slot.path[n] = '\0';
    slot.length.store(length, std::memory_order_relaxed);
    slot.base.store(reinterpret_cast<uintptr_t>(base), std::memory_order_release);
    return;
  }
  // Table full: this mapping is used unguarded (documented in the header).
}

void unregister_mapped_range(const void* base) {
  if (base == nullptr) return;
  const std::lock_guard<std::mutex> lock(g_mutex);
  for (Slot& slot : g_slots) {
    if (slot.base.load(std::memory_order_relaxed) == reinterpret_cast<uintptr_t>(base)) {
      slot.base.store(0, std::memory_order_release);
      return;
    }
  }
}

}  // namespace steermoe
