#include "common/machine.hpp"

#include <sys/utsname.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

namespace steermoe {

namespace {

// "MemTotal:       24540000 kB" -> bytes.
uint64_t meminfo_bytes(const std::string& text, const std::string& key) {
  const size_t at = text.find(key + ":");
  if (at == std::string::npos) return 0;
  std::istringstream in(text.substr(at + key.size() + 1));
  uint64_t kib = 0;
  in >> kib;
  return kib * 1024;
}

}  // namespace

MachineFacts machine_facts() {
  MachineFacts m;
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) m.cpu = line.substr(line.find_first_not_of(' ', colon + 1));
      break;
    }
  }
  m.cores = static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN));
  std::ifstream meminfo("/proc/meminfo");
  std::stringstream text;
  text << meminfo.rdbuf();
  m.mem_total = meminfo_bytes(text.str(), "MemTotal");
  m.mem_available = meminfo_bytes(text.str(), "MemAvailable");
  utsname u{};
  if (::uname(&u) == 0) m.kernel = u.release;
  return m;
}

}  // namespace steermoe
