// The one way tests run the built steermoe CLI (STEERMOE_BINARY, set by steermoe_test()).
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace steermoe::test_support {

struct CliResult {
  int status = -1;     // exit status; -1 if the command could not start or did not exit normally
  std::string output;  // stdout and stderr, interleaved as written
};

inline CliResult run_cli(const std::string& args) {
  const std::string command = std::string(STEERMOE_BINARY) + " " + args + " 2>&1";
  CliResult result;
  std::FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return result;
  std::array<char, 4096> buffer{};
  size_t n = 0;
  while ((n = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0) result.output.append(buffer.data(), n);
  const int status = ::pclose(pipe);
  result.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

}  // namespace steermoe::test_support
