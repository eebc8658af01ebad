// Achieved bandwidth of the byte-moving links, printed as JSON:
//  - disk: expert-sized reads from a scratch file (dropped from the page cache before each run)
//    through io_uring and pread, with O_DIRECT and buffered;
//  - emulated: achieved vs requested bandwidth for expert-sized copies from host memory.
// Usage: bench_link [--dir DIR] [--file-mb 512] [--expert-bytes 12582912] [--depth 16]
//                   [--chunk-kb 1024]
// The scratch file goes in DIR (default: the current folder; it must not be a tmpfs for
// O_DIRECT) and is removed at the end.
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/json_input.hpp"
#include "link/disk_link.hpp"
#include "link/emulated_link.hpp"

namespace {

using namespace steermoe::link;
namespace fs = std::filesystem;

double seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void write_file(const fs::path& path, uint64_t size) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) std::exit((std::perror("open"), 1));
  std::vector<uint64_t> buf(uint64_t{1} << 17);
  for (uint64_t done = 0; done < size;) {
    for (size_t i = 0; i < buf.size(); ++i) buf[i] = (done / 8 + i) * 0x9E3779B97F4A7C15ull;
    const uint64_t n = std::min<uint64_t>(buf.size() * 8, size - done);
    if (::write(fd, buf.data(), n) != static_cast<ssize_t>(n)) std::exit((std::perror("write"), 1));
    done += n;
  }
  ::fsync(fd);
  ::close(fd);
}

void drop_cache(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

}  // namespace

int main(int argc, char** argv) {
  fs::path dir = fs::current_path();
  uint64_t file_mb = 512, expert_bytes = 12582912, chunk_kb = 1024;
  int depth = 16;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--dir")
      dir = argv[i + 1];
    else if (a == "--file-mb")
      file_mb = std::strtoull(argv[i + 1], nullptr, 10);
    else if (a == "--expert-bytes")
      expert_bytes = std::strtoull(argv[i + 1], nullptr, 10);
    else if (a == "--depth")
      depth = std::atoi(argv[i + 1]);
    else if (a == "--chunk-kb")
      chunk_kb = std::strtoull(argv[i + 1], nullptr, 10);
    else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      return 2;
    }
  }
  nlohmann::json out;
  out["expert_bytes"] = expert_bytes;
  out["file_bytes"] = file_mb << 20;

  // ---- disk ----
  const fs::path path = dir / "bench_link.bin";
  const uint64_t file_bytes = file_mb << 20;
  write_file(path, file_bytes);
  const auto experts = static_cast<int32_t>((file_bytes - 4096) / expert_bytes);
  ExpertLayout layout({{path, file_bytes}}, {0}, experts);
  for (int32_t e = 0; e < experts; ++e) {
    // Three matrices per expert, not 4 KiB-aligned (as in a GGUF or safetensors file).
    const uint64_t base = static_cast<uint64_t>(e) * expert_bytes + 96;
    const uint64_t third = expert_bytes / 3;
    const PartSource p[] = {{0, base, third, nullptr},
                            {0, base + third, third, nullptr},
                            {0, base + 2 * third, expert_bytes - 2 * third - 96, nullptr}};
    layout.add_expert(p);
  }
  SlotArena arena(1, 8, layout.slot_bytes());
  std::memset(arena.slot(0, 0), 0, arena.total_bytes());
  nlohmann::json disk = nlohmann::json::array();
  for (const DiskIo io : {DiskIo::kUring, DiskIo::kPread}) {
    for (const bool direct : {true, false}) {
      drop_cache(path);
      DiskLinkOptions o;
      o.io = io;
      o.direct = direct;
      o.queue_depth = depth;
      o.chunk_bytes = chunk_kb << 10;
      DiskLink link(layout, arena, o);
      const double t0 = seconds();
      Ticket t = kNoTicket;
      for (int32_t e = 0; e < experts; ++e)
        t = link.enqueue({.layer = 0, .slot = e % 8, .expert = e});
      link.wait(t);
      const double dt = seconds() - t0;
      uint64_t bytes = 0;
      for (int32_t e = 0; e < experts; ++e) bytes += layout.expert_bytes(0, e);
      disk.push_back({{"mode", link.mode()},
                      {"copies", experts},
                      {"seconds", dt},
                      {"gb_per_s", static_cast<double>(bytes) / dt / 1e9},
                      {"read_bytes", link.bytes_read()},
                      {"queue_depth", io == DiskIo::kUring ? depth : 1},
                      {"chunk_bytes", chunk_kb << 10}});
    }
  }
  drop_cache(path);
  fs::remove(path);
  out["disk"] = disk;

  // ---- emulated ----
  const int32_t sources = 8;
  std::vector<std::byte> host(static_cast<size_t>(sources) * expert_bytes, std::byte{1});
  ExpertLayout mem({}, {0}, sources);
  for (int32_t e = 0; e < sources; ++e) {
    const PartSource p[] = {
        {-1, 0, expert_bytes, host.data() + static_cast<size_t>(e) * expert_bytes}};
    mem.add_expert(p);
  }
  SlotArena mem_arena(1, 4, mem.slot_bytes());
  std::memset(mem_arena.slot(0, 0), 0, mem_arena.total_bytes());
  nlohmann::json emulated = nlohmann::json::array();
  for (const double gbps : {2.0, 8.0, 25.0, 1000.0}) {
    for (const double latency_us : {0.0, 10.0}) {
      EmulatedLink link(mem, mem_arena,
                        {.bandwidth_bytes_per_s = gbps * 1e9, .latency_s = latency_us * 1e-6});
      const int copies = 64;
      const double t0 = link.now();
      Ticket t = kNoTicket;
      for (int i = 0; i < copies; ++i)
        t = link.enqueue({.layer = 0, .slot = i % 4, .expert = i % sources});
      link.wait(t);
      const double dt = link.now() - t0;
      const double requested_s =
          copies * (latency_us * 1e-6 + static_cast<double>(expert_bytes) / (gbps * 1e9));
      emulated.push_back(
          {{"requested_gb_per_s", gbps},
           {"latency_us", latency_us},
           {"copies", copies},
           {"achieved_gb_per_s", copies * static_cast<double>(expert_bytes) / dt / 1e9},
           {"seconds", dt},
           {"model_seconds", requested_s},
           {"memcpy_gb_per_s",
            copies * static_cast<double>(expert_bytes) / link.memcpy_seconds() / 1e9}});
    }
  }
  out["emulated"] = emulated;
  std::printf("%s\n", steermoe::dump_json(out, 2).c_str());
  return 0;
}
