// The server's counters and their Prometheus text (GET /metrics).
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "server/generation.hpp"
#include "server/http_front.hpp"
#include "server/worker.hpp"

namespace steermoe::server {

struct Metrics {
  std::mutex mu;
  std::map<std::pair<std::string, int>, int64_t> requests;  // (path, status) -> count
  std::atomic<int64_t> rejected{0}, cancelled{0}, prompt_tokens{0}, generated_tokens{0},
      decode_tokens{0}, copies_demand{0}, copies_prefetch{0};
  std::atomic<int64_t> decode_us{0}, prompt_us{0};

  // One answered request; unknown paths are folded into "other" so a scan cannot grow the
  // table.
  void count(const std::string& path, int status);
  // A finished job's tokens, times and copies.
  void account(const Job& job);
  std::string text(const Worker& worker, const http::FrontStats& front);
};

}  // namespace steermoe::server
