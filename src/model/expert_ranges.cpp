#include "model/expert_ranges.hpp"

#include <functional>
#include <span>
#include <vector>

#include "common/error.hpp"
#include "model/gguf.hpp"
#include "model/safetensors.hpp"

namespace steermoe::model {
namespace {

// The mapped bytes of every file holding weights, in file-index order.
std::vector<std::span<const std::byte>> mapped_files(const Model& model,
                                                     std::vector<link::ExpertFile>& files) {
  std::vector<std::span<const std::byte>> maps;
  auto add = [&](const std::string& path, std::span<const std::byte> bytes) {
    files.push_back({path, bytes.size()});
    maps.push_back(bytes);
  };
  if (model.format() == WeightFormat::kGguf) {
    for (const GgufFile& f : model.gguf_files()) add(f.name(), f.bytes());
  } else {
    const Checkpoint& c = *model.checkpoint();
    for (size_t i = 0; i < c.shard_count(); ++i) add(c.shard(i).name(), c.shard(i).bytes());
  }
  return maps;
}

link::PartSource locate(const kernels::Matrix& m,
                        const std::vector<std::span<const std::byte>>& maps) {
  SM_ASSERT_MSG(m.row_stride == 0 || m.row_stride == m.cols, "expert matrices are contiguous");
  link::PartSource part;
  part.source = static_cast<const std::byte*>(m.data);
  // The element bytes (in the stored type: BF16, a GGUF block type, FP8). FP8's block scales
  // (kernels::matrix_ranges(m).range[1]) are small, live in host memory and are not moved: a
  // rebased matrix keeps the original's scale pointer.
  part.bytes = kernels::matrix_ranges(m).range[0].bytes;
  const std::less<const std::byte*> before;
  for (size_t i = 0; i < maps.size(); ++i) {
    const std::byte* begin = maps[i].data();
    const std::byte* end = begin + maps[i].size();
    if (!before(part.source, begin) && before(part.source, end)) {
      part.file = static_cast<int32_t>(i);
      part.file_offset = static_cast<uint64_t>(part.source - begin);
      break;
    }
  }
  return part;
}

}  // namespace

link::ExpertLayout expert_layout(const Model& model) {
  const ModelConfig& c = model.config();
  std::vector<link::ExpertFile> files;
  const std::vector<std::span<const std::byte>> maps = mapped_files(model, files);
  std::vector<int32_t> moe_layers;
  for (int l = 0; l < c.layers; ++l)
    if (model.layer(l).moe) moe_layers.push_back(l);
  link::ExpertLayout layout(std::move(files), moe_layers, c.experts);
  for (const int32_t l : moe_layers) {
    const LayerWeights& w = model.layer(l);
    SM_ASSERT(w.experts.size() == static_cast<size_t>(c.experts));
    for (const SwigluWeights& s : w.experts) {
      const link::PartSource parts[3] = {locate(s.gate, maps), locate(s.up, maps),
                                         locate(s.down, maps)};
      layout.add_expert(parts);
    }
  }
  return layout;
}

SwigluWeights rebase_expert(const SwigluWeights& original, const link::ExpertLayout& layout,
                            int32_t moe_layer, int32_t expert, const std::byte* slot) {
  const auto parts = layout.parts(moe_layer, expert);
  SM_ASSERT_MSG(parts.size() == 3, "expert layout from model::expert_layout (gate, up, down)");
  auto data_bytes = [](const kernels::Matrix& m) {
    return kernels::matrix_ranges(m).range[0].bytes;
  };
  SM_ASSERT(parts[0].bytes == data_bytes(original.gate) &&
            parts[1].bytes == data_bytes(original.up) &&
            parts[2].bytes == data_bytes(original.down));
  SwigluWeights s = original;
  s.gate.data = slot + parts[0].slot_offset;
  s.up.data = slot + parts[1].slot_offset;
  s.down.data = slot + parts[2].slot_offset;
  return s;
}

}  // namespace steermoe::model
