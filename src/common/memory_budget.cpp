#include "common/memory_budget.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

#include "common/error.hpp"

namespace steermoe {

namespace fs = std::filesystem;

namespace {

std::optional<std::string> read_line(const fs::path& p) {
  std::ifstream in(p);
  std::string line;
  if (!in || !std::getline(in, line)) return std::nullopt;
  return line;
}

bool write_text(const fs::path& p, const std::string& text) {
  std::ofstream out(p);
  out << text;
  out.flush();
  return static_cast<bool>(out);
}

std::optional<uint64_t> read_number(const fs::path& p) {
  const std::optional<std::string> line = read_line(p);
  if (!line) return std::nullopt;
  try {
    return std::stoull(*line);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

// This process's cgroup: the v2 path ("0::/x") or the v1 memory controller's ("N:memory:/x").
struct CurrentCgroup {
  fs::path dir;
  bool v2 = false;
};

std::optional<CurrentCgroup> current_memory_cgroup() {
  std::ifstream in("/proc/self/cgroup");
  std::string line, v2_path;
  while (std::getline(in, line)) {
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1);
    const std::string path = line.substr(b + 1);
    std::stringstream list(controllers);
    for (std::string c; std::getline(list, c, ',');)
      if (c == "memory" && fs::exists("/sys/fs/cgroup/memory/memory.limit_in_bytes"))
        return CurrentCgroup{fs::path("/sys/fs/cgroup/memory") / path.substr(1), false};
    if (controllers.empty()) v2_path = path;
  }
  if (!v2_path.empty() && fs::exists("/sys/fs/cgroup/cgroup.controllers"))
    return CurrentCgroup{fs::path("/sys/fs/cgroup") / v2_path.substr(1), true};
  return std::nullopt;
}

// This process's resident bytes now (/proc/self/statm), 0 where unknown.
uint64_t resident_bytes_now() {
  std::ifstream in("/proc/self/statm");
  uint64_t size = 0, resident = 0;
  if (!(in >> size >> resident)) return 0;
  return resident * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
}

// Cgroups this program made for processes that are gone (killed before their destructor ran:
// SIGKILL, the OOM killer): "steermoe-<pid>" beside `dir` with no process in it. Best effort.
void remove_stale_budgets(const fs::path& parent) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(parent, ec)) {
    const std::string name = entry.path().filename().string();
    if (!name.starts_with("steermoe-") || !entry.is_directory(ec)) continue;
    const std::string pid = name.substr(9);
    if (pid.empty() || pid.find_first_not_of("0123456789") != std::string::npos) continue;
    if (fs::exists(fs::path("/proc") / pid, ec)) continue;  // alive (or a reused pid): keep
    const std::optional<std::string> member = read_line(entry.path() / "cgroup.procs");
    if (member && !member->empty()) continue;
    fs::remove(entry.path(), ec);  // rmdir of an empty cgroup
  }
}

[[noreturn]] void cannot(const std::string& why) {
  fail("--mem-limit", "cgroup",
       "expected to create a memory cgroup for the budget, but {}; impose it from outside "
       "instead (systemd-run --scope -p MemoryMax=BYTES steermoe ..., or a cgroup you made)",
       why);
}

}  // namespace

uint64_t parse_byte_count(const std::string& text, const std::string& flag) {
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  // std::stod also reads hexadecimal ("0x10"), "inf", "nan" and leading spaces: a byte count is
  // decimal digits, a point and an exponent only.
  const bool decimal =
      !text.empty() && (std::isdigit(static_cast<unsigned char>(text[0])) || text[0] == '.');
  for (size_t i = 0; i < used && decimal; ++i) {
    const char c = text[i];
    if (!std::isdigit(static_cast<unsigned char>(c)) && c != '.' && c != 'e' && c != 'E' &&
        c != '+' && c != '-')
      used = 0;
  }
  if (!decimal) used = 0;
  std::string unit = text.substr(used);
  for (char& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  double scale = 0;
  if (unit.empty() || unit == "B") scale = 1;
  const char* prefixes = "KMGT";
  for (int i = 0; i < 4 && scale == 0; ++i) {
    const std::string p(1, prefixes[i]);
    if (unit == p || unit == p + "IB") scale = std::pow(1024.0, i + 1);
    if (unit == p + "B") scale = std::pow(1000.0, i + 1);
  }
  if (used == 0 || scale == 0 || !(value > 0) || !std::isfinite(value) || value * scale > 1.8e19)
    fail(flag, "value", "expected a byte count such as 3000000000, 3G, 2.5GiB or 800MB, found '{}'",
         text);
  return static_cast<uint64_t>(value * scale);
}

MemoryBudget MemoryBudget::enter(uint64_t bytes) {
  const std::optional<CurrentCgroup> current = current_memory_cgroup();
  if (!current) cannot("no memory cgroup controller is mounted");
  // The process is charged for what it allocates from the moment it enters the cgroup: a limit
  // below what it already holds (plus room to read the model's header) makes the kernel kill it
  // at once, with no message. Refuse such a limit here, where a message can still be printed.
  constexpr uint64_t kHeadroom = uint64_t{64} << 20;
  const uint64_t holding = resident_bytes_now();
  if (bytes < holding + kHeadroom)
    fail("--mem-limit", "value",
         "expected at least {:.0f} MiB (this process holds {:.0f} MiB before loading anything, "
         "and the model's own weights, slots and KV come on top), found {} bytes",
         static_cast<double>(holding + kHeadroom) / (1 << 20),
         static_cast<double>(holding) / (1 << 20), bytes);
  remove_stale_budgets(current->dir);
  MemoryBudget b;
  b.v2_ = current->v2;
  b.limit_ = bytes;
  b.parent_ = current->dir.string();
  const fs::path dir = current->dir / ("steermoe-" + std::to_string(::getpid()));
  std::error_code ec;
  fs::create_directory(dir, ec);
  if (ec) cannot(dir.string() + " cannot be created (" + ec.message() + ")");
  b.dir_ = dir.string();
  const fs::path limit_file = dir / (b.v2_ ? "memory.max" : "memory.limit_in_bytes");
  // v2: no swap either, so the budget is RAM (v1's limit does not cover swap unless memsw).
  if (b.v2_) write_text(dir / "memory.swap.max", "0");
  if (!write_text(limit_file, std::to_string(bytes))) {
    fs::remove(dir, ec);
    cannot(limit_file.string() + " cannot be written");
  }
  if (!write_text(dir / "cgroup.procs", std::to_string(::getpid()))) {
    fs::remove(dir, ec);
    cannot("this process cannot be moved into " + dir.string());
  }
  return b;
}

MemoryBudget::MemoryBudget(MemoryBudget&& other) noexcept
    : dir_(std::exchange(other.dir_, {})),
      parent_(std::move(other.parent_)),
      v2_(other.v2_),
      limit_(other.limit_) {}

MemoryBudget::~MemoryBudget() {
  if (dir_.empty()) return;
  // Back to the parent (a cgroup with a member cannot be removed); best effort at exit.
  write_text(fs::path(parent_) / "cgroup.procs", std::to_string(::getpid()));
  std::error_code ec;
  fs::remove(dir_, ec);
}

std::optional<uint64_t> MemoryBudget::peak_bytes() const {
  if (dir_.empty()) return std::nullopt;
  return read_number(fs::path(dir_) / (v2_ ? "memory.peak" : "memory.max_usage_in_bytes"));
}

std::optional<uint64_t> MemoryBudget::usage_bytes() const {
  if (dir_.empty()) return std::nullopt;
  return read_number(fs::path(dir_) / (v2_ ? "memory.current" : "memory.usage_in_bytes"));
}

uint64_t cached_file_bytes(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  uint64_t cached = 0;
  struct stat st {};
  if (::fstat(fd, &st) == 0 && st.st_size > 0) {
    const auto size = static_cast<size_t>(st.st_size);
    // Mapping touches no page; mincore reports which pages the page cache holds.
    void* map = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
    if (map != MAP_FAILED) {
      const auto page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
      std::vector<unsigned char> resident((size + page - 1) / page);
      if (::mincore(map, size, resident.data()) == 0)
        for (size_t i = 0; i < resident.size(); ++i)
          if ((resident[i] & 1) != 0) cached += std::min(page, size - i * page);
      ::munmap(map, size);
    }
  }
  ::close(fd);
  return cached;
}

uint64_t peak_rss_bytes() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<uint64_t>(u.ru_maxrss) * 1024;  // Linux reports KiB
}

}  // namespace steermoe
