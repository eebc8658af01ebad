// Linked into every test executable: gives each test process its own temporary folder (through
// TEST_TMPDIR, which testing::TempDir() reads), so tests that CTest runs in parallel, or two
// checkouts tested at once on one machine, never share a scratch file. Removed at exit.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>

namespace {

struct PerProcessTempDir {
  std::filesystem::path path;
  PerProcessTempDir() {
    const char* base = std::getenv("TMPDIR");
    path = std::filesystem::path(base != nullptr && *base != '\0' ? base : "/tmp") /
           ("steermoe-test-" + std::to_string(static_cast<long>(getpid())));
    std::error_code ec;
    std::filesystem::create_directories(path, ec);
    if (!ec) setenv("TEST_TMPDIR", (path.string() + "/").c_str(), 1);
  }
  ~PerProcessTempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

const PerProcessTempDir kTempDir;

}  // namespace
