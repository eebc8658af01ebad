// The per-token decode path allocates nothing once the engine is built: a global operator new
// counts calls while tokens are decoded (with and without the routing recorder off).
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <new>

#include "engine/engine.hpp"

namespace {
std::atomic<long> g_allocations{0};
}

void* operator new(std::size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
  std::free(p);
}

namespace steermoe::engine {
namespace {

namespace fs = std::filesystem;
const fs::path kOracle = fs::path(STEERMOE_SOURCE_DIR) / ".." / "shared" / "oracle";

TEST(NoAllocation, DecodeAllocatesNothing) {
  for (const char* m : {"olmoe", "qwen3moe", "deepseek2_v3", "deepseek2_moonlight"}) {
    SCOPED_TRACE(m);
    auto model = model::Model::load(kOracle / m / "model.gguf");
    for (int threads : {1, 2}) {
      Engine engine(*model, {.threads = threads, .context = 64});
      engine.decode(1);  // warm-up: per-thread attention scratch grows once
      engine.decode(2);
      const long before = g_allocations.load();
      for (int t = 0; t < 20; ++t) engine.decode(static_cast<int32_t>(10 + t));
      EXPECT_EQ(g_allocations.load() - before, 0) << threads << " threads";
    }
  }
}

}  // namespace
}  // namespace steermoe::engine
