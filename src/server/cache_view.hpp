// What the expert cache is doing, for the chat page's live view (GET /steermoe/cache): per MoE
// layer the experts in the logical cache, the ones the last token ran and the ones copied for
// it (demand, prefetch), and the copies and stall of the request so far. Taken on the engine's
// thread (the engine is not thread-safe) and handed to HTTP threads as a value.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/cache_stats.hpp"
#include "engine/engine.hpp"
#include "server/protocol.hpp"

namespace steermoe::server {

struct CacheView {
  int64_t version = 0;  // increases with every snapshot
  bool moe = false;
  std::string policy;
  int cache_slots = 0, experts = 0, top_k = 0;
  int64_t step = 0;  // tokens routed in the current request (prompt included)
  struct Layer {
    std::vector<int32_t> resident, selected, demand, prefetch;
  };
  std::vector<Layer> layers;
  engine::CacheStats last_token;  // the last routed token's copies (physical links)
  engine::CacheStats request;     // since the request began
};

// On the engine's thread.
CacheView snapshot_cache(const engine::Engine& engine, int64_t version);
json cache_view_json(const CacheView& view);

}  // namespace steermoe::server
