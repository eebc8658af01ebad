// The per-token decode path allocates nothing once the engine is built: a global operator new
// counts calls while tokens are decoded.
#include <gtest/gtest.h>

#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <filesystem>
#include <new>

#include "engine/engine.hpp"
#include "model/weights_layout.hpp"

namespace {
std::atomic<long> g_allocations{0};
}

// Every replaceable allocation function is replaced (plain, array, nothrow, aligned), so that all
// memory comes from malloc and returns through free, also under AddressSanitizer (which would
// otherwise pair its own nothrow new, used by std::stable_sort, with our delete). GCC cannot see
// that the pairs match and warns, hence the pragma.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpragmas"
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
static void* counted_alloc(std::size_t n, std::size_t align = 0) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (n == 0) n = 1;
  if (align > alignof(std::max_align_t))
    return std::aligned_alloc(align, (n + align - 1) / align * align);
  return std::malloc(n);
}
static void* counted_or_throw(std::size_t n, std::size_t align = 0) {
  if (void* p = counted_alloc(n, align)) return p;
  throw std::bad_alloc();
}
void* operator new(std::size_t n) {
  return counted_or_throw(n);
}
void* operator new[](std::size_t n) {
  return counted_or_throw(n);
}
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  return counted_alloc(n);
}
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
  return counted_alloc(n);
}
void* operator new(std::size_t n, std::align_val_t a) {
  return counted_or_throw(n, static_cast<std::size_t>(a));
}
void* operator new[](std::size_t n, std::align_val_t a) {
  return counted_or_throw(n, static_cast<std::size_t>(a));
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete[](void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
  std::free(p);
}
void operator delete[](void* p, std::size_t) noexcept {
  std::free(p);
}
void operator delete(void* p, const std::nothrow_t&) noexcept {
  std::free(p);
}
void operator delete[](void* p, const std::nothrow_t&) noexcept {
  std::free(p);
}
void operator delete(void* p, std::align_val_t) noexcept {
  std::free(p);
}
void operator delete[](void* p, std::align_val_t) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t, std::align_val_t) noexcept {
  std::free(p);
}
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept {
  std::free(p);
}
#pragma GCC diagnostic pop

namespace steermoe::engine {
namespace {

namespace fs = std::filesystem;
const fs::path kOracle = fs::path(STEERMOE_ORACLE_DIR);

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

// The hybrid families (Gated DeltaNet state, gated attention, YaRN) and the other tiny
// transformers-made models (the dense Qwen3 too) decode allocation-free too.
TEST(NoAllocation, HybridAndVariantDecodeAllocatesNothing) {
  const fs::path data = fs::path(STEERMOE_SOURCE_DIR) / "tests" / "data" / "hf_models";
  for (const char* m :
       {"qwen3_next", "qwen3_5_moe", "deepseek_v3_yarn", "olmoe_clip", "qwen3_dense"}) {
    SCOPED_TRACE(m);
    auto model = model::Model::load(data / m);
    for (int threads : {1, 2}) {
      Engine engine(*model, {.threads = threads, .context = 64});
      engine.decode(1);
      engine.decode(2);
      const long before = g_allocations.load();
      for (int t = 0; t < 20; ++t) engine.decode(static_cast<int32_t>(10 + t));
      EXPECT_EQ(g_allocations.load() - before, 0) << threads << " threads";
    }
  }
}

// The same with quantized weights (Q8_0 where rows are whole blocks, Q4_K where they are whole
// super-blocks): the int8 activation scratch also grows once.
TEST(NoAllocation, QuantizedDecodeAllocatesNothing) {
  for (const char* m : {"olmoe", "deepseek2_v3"}) {
    SCOPED_TRACE(m);
    auto source = model::Model::load(kOracle / m / "model.gguf");
    const fs::path q = fs::path(testing::TempDir()) / (std::string("noalloc_q_") + m + ".gguf");
    model::write_model(
        source->config(), q,
        model::model_slot_source(*source, [](const model::TensorSlot& s, model::DType d) {
          if (s.vector()) return d;
          if (s.shape.back() % 256 == 0) return model::DType::kQ4_K;
          return s.shape.back() % 32 == 0 ? model::DType::kQ8_0 : d;
        }));
    auto model = model::Model::load(q);
    ASSERT_TRUE(kernels::dtype_is_block(model->layer(1).experts[0].gate.dtype));
    ASSERT_TRUE(kernels::dtype_is_block(model->lm_head().dtype));
    for (int threads : {1, 2}) {
      Engine engine(*model, {.threads = threads, .context = 64});
      engine.decode(1);
      engine.decode(2);
      const long before = g_allocations.load();
      for (int t = 0; t < 20; ++t) engine.decode(static_cast<int32_t>(10 + t));
      EXPECT_EQ(g_allocations.load() - before, 0) << threads << " threads";
    }
  }
}

}  // namespace
}  // namespace steermoe::engine
