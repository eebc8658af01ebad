// The per-token decode path allocates nothing once the engine is built: a global operator new
// counts calls while tokens are decoded.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>

#include "engine/engine.hpp"
#include "model/weights_layout.hpp"

#include "../alloc_counter.hpp"

namespace steermoe::engine {
namespace {

namespace fs = std::filesystem;
const fs::path kOracle = fs::path(STEERMOE_ORACLE_DIR);

// Allocations of 20 decode steps once two tokens have warmed the engine up (per-thread attention
// scratch and the int8 activation scratch grow once).
int64_t allocations_of_decode(model::Model& model, int threads) {
  Engine engine(model, {.threads = threads, .context = 64});
  engine.decode(1);
  engine.decode(2);
  test_support::start_counting_allocations();
  for (int t = 0; t < 20; ++t) engine.decode(static_cast<int32_t>(10 + t));
  return test_support::stop_counting_allocations();
}

TEST(NoAllocation, DecodeAllocatesNothing) {
  for (const char* m : {"olmoe", "qwen3moe", "deepseek2_v3", "deepseek2_moonlight"}) {
    SCOPED_TRACE(m);
    auto model = model::Model::load(kOracle / m / "model.gguf");
    for (int threads : {1, 2}) {
      EXPECT_EQ(allocations_of_decode(*model, threads), 0) << threads << " threads";
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
      EXPECT_EQ(allocations_of_decode(*model, threads), 0) << threads << " threads";
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
      EXPECT_EQ(allocations_of_decode(*model, threads), 0) << threads << " threads";
    }
  }
}

}  // namespace
}  // namespace steermoe::engine
