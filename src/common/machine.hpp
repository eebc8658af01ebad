// Facts about the machine a measurement ran on, for reports that must name it (`bench --json`).
#pragma once

#include <cstdint>
#include <string>

namespace steermoe {

struct MachineFacts {
  std::string cpu;             // /proc/cpuinfo "model name" ("" when unknown)
  int cores = 0;               // online CPUs
  uint64_t mem_total = 0;      // bytes (MemTotal)
  uint64_t mem_available = 0;  // bytes (MemAvailable) when read
  std::string kernel;          // uname release
};

MachineFacts machine_facts();

}  // namespace steermoe
