// model::expert_layout on every expert layout the loader accepts (GGUF stacked, HF per expert,
// HF fused gate_up, sharded safetensors; a family with a dense first layer), and the matrices
// rebased into a slot after a copy by each link: byte-identical to the originals.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "link/disk_link.hpp"
#include "link/emulated_link.hpp"
#include "model/expert_ranges.hpp"
#include "model/safetensors.hpp"
#include "model/weights_layout.hpp"
#include "test_util.hpp"

namespace steermoe::model {
namespace {

namespace fs = std::filesystem;
using link::testing::scratch;

// The llama.cpp oracle committed in tests/data/oracle.
fs::path oracle() {
  return fs::path(STEERMOE_ORACLE_DIR);
}

bool same_matrix(const kernels::Matrix& a, const kernels::Matrix& b) {
  return a.dtype == b.dtype && a.rows == b.rows && a.cols == b.cols &&
         a.row_stride == b.row_stride &&
         std::memcmp(a.data, b.data, static_cast<size_t>(matrix_bytes(a))) == 0;
}

// Every part is the matrix it stands for, at the right place of its file; after a copy by
// `link` the rebased expert is byte-identical to the original.
void check_layout(const fs::path& path, size_t expect_files = 0) {
  SCOPED_TRACE(path.string());
  const auto model = Model::load(path);
  const ModelConfig& c = model->config();
  const link::ExpertLayout layout = expert_layout(*model);
  ASSERT_TRUE(layout.complete());
  ASSERT_EQ(layout.layers(), c.moe_layer_count());
  ASSERT_EQ(layout.experts(), c.experts);
  ASSERT_TRUE(layout.on_disk());
  ASSERT_TRUE(layout.in_memory());
  if (expect_files > 0) {
    EXPECT_EQ(layout.files().size(), expect_files);
  }
  std::vector<int> fds;
  for (const link::ExpertFile& f : layout.files()) {
    fds.push_back(::open(f.path.c_str(), O_RDONLY));
    ASSERT_GE(fds.back(), 0);
    EXPECT_EQ(f.size, fs::file_size(f.path));
  }
  std::vector<std::byte> buf;
  for (int32_t m = 0; m < layout.layers(); ++m) {
    const LayerWeights& w = model->layer(layout.model_layer(m));
    ASSERT_TRUE(w.moe);
    for (int32_t e = 0; e < layout.experts(); ++e) {
      const SwigluWeights& s = w.experts[static_cast<size_t>(e)];
      const auto parts = layout.parts(m, e);
      ASSERT_EQ(parts.size(), 3u);
      const kernels::Matrix* mats[3] = {&s.gate, &s.up, &s.down};
      for (int i = 0; i < 3; ++i) {
        const link::ExpertPart& p = parts[static_cast<size_t>(i)];
        EXPECT_EQ(p.source, mats[i]->data);
        EXPECT_EQ(p.bytes, matrix_bytes(*mats[i]));
        buf.resize(p.bytes);
        ASSERT_EQ(::pread(fds[static_cast<size_t>(p.file)], buf.data(), p.bytes,
                          static_cast<off_t>(p.file_offset)),
                  static_cast<ssize_t>(p.bytes));
        EXPECT_EQ(std::memcmp(buf.data(), p.source, p.bytes), 0) << m << " " << e << " " << i;
      }
    }
  }
  for (int fd : fds) ::close(fd);

  link::SlotArena arena(layout.layers(), 2, layout.slot_bytes());
  auto copy_and_compare = [&](link::Link& lk) {
    for (int32_t m = 0; m < layout.layers(); ++m) {
      const LayerWeights& w = model->layer(layout.model_layer(m));
      for (int32_t e = 0; e < layout.experts(); ++e) {
        std::memset(arena.slot(m, e % 2), 0xEE, arena.slot_bytes());
        lk.wait(lk.enqueue({.layer = m, .slot = e % 2, .expert = e}));
        const SwigluWeights& s = w.experts[static_cast<size_t>(e)];
        const SwigluWeights r = rebase_expert(s, layout, m, e, arena.slot(m, e % 2));
        EXPECT_NE(r.gate.data, s.gate.data);
        EXPECT_TRUE(same_matrix(r.gate, s.gate)) << m << " " << e;
        EXPECT_TRUE(same_matrix(r.up, s.up)) << m << " " << e;
        EXPECT_TRUE(same_matrix(r.down, s.down)) << m << " " << e;
      }
    }
  };
  {
    link::DiskLink disk(layout, arena, {});
    copy_and_compare(disk);
  }
  {
    link::EmulatedLink emulated(layout, arena, {.bandwidth_bytes_per_s = 1e12});
    copy_and_compare(emulated);
  }
}

void make(const std::string& shape, const fs::path& out, DType dtype = DType::kBF16) {
  write_model(shape_config(shape), out, random_slot_source(dtype, 11));
}

TEST(ModelLayout, GgufStackedExperts) {
  const auto dir = scratch("model_gguf");
  make("olmoe-small", dir / "m.gguf");
  check_layout(dir / "m.gguf", 1);
}

TEST(ModelLayout, GgufWithADenseFirstLayer) {
  const auto dir = scratch("model_deepseek");
  make("deepseek-small", dir / "m.gguf", DType::kF16);
  const auto model = Model::load(dir / "m.gguf");
  EXPECT_EQ(expert_layout(*model).model_layer(0), 1);
  check_layout(dir / "m.gguf", 1);
}

TEST(ModelLayout, SafetensorsPerExpert) {
  const auto dir = scratch("model_hf");
  make("qwen3moe-small", dir / "hf", DType::kF32);
  check_layout(dir / "hf", 1);
}

TEST(ModelLayout, SafetensorsSharded) {
  const auto dir = scratch("model_sharded");
  make("olmoe-small", dir / "hf");
  const auto single = Model::load(dir / "hf");
  const SlotSource src = model_slot_source(*single);
  {
    ShardedSafetensorsWriter w(dir / "sharded", 64 << 10);
    for (const TensorSlot& s : tensor_layout(single->config(), WeightFormat::kSafetensors)) {
      const DType dt = src.dtype_of(s);
      w.add_tensor(s.name, dt, s.shape,
                   [&src, s, dt](OutputFile& out) { src.produce(s, dt, out); });
    }
    w.finish();
  }
  fs::copy_file(dir / "hf" / "config.json", dir / "sharded" / "config.json");
  const auto sharded = Model::load(dir / "sharded");
  const link::ExpertLayout layout = expert_layout(*sharded);
  ASSERT_GT(layout.files().size(), 2u);
  EXPECT_NE(layout.parts(0, 0)[0].file, layout.parts(layout.layers() - 1, 0)[0].file);
  check_layout(dir / "sharded", sharded->checkpoint()->shard_count());
}

TEST(ModelLayout, ShippedModel) {
  check_layout(fs::path(STEERMOE_SOURCE_DIR) / "models" / "steer-olmoe-tiny", 1);
}

TEST(ModelLayout, FusedGateUpFromTheOracle) {
  const fs::path path = oracle() / "olmoe" / "hf_fused";
  ASSERT_TRUE(fs::exists(path)) << "oracle not found at " << oracle();
  const auto model = Model::load(path);
  const link::ExpertLayout layout = expert_layout(*model);
  // gate and up are adjacent slices of one [E, 2I, H] tensor.
  const auto p = layout.parts(0, 1);
  EXPECT_EQ(p[1].file_offset, p[0].file_offset + p[0].bytes);
  check_layout(path, 1);
  check_layout(oracle() / "olmoe" / "model.gguf", 1);
}

}  // namespace
}  // namespace steermoe::model
