#include "link/expert_layout.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "common/error.hpp"

namespace steermoe::link {

ExpertLayout::ExpertLayout(std::vector<ExpertFile> files, std::vector<int32_t> model_layers,
                           int32_t experts)
    : files_(std::move(files)), model_layers_(std::move(model_layers)), experts_(experts) {
  SM_ASSERT(experts_ >= 0);
  const size_t n = model_layers_.size() * static_cast<size_t>(experts_);
  first_part_.reserve(n + 1);
  expert_bytes_.reserve(n);
}

int32_t ExpertLayout::model_layer(int32_t moe_layer) const {
  SM_ASSERT(moe_layer >= 0 && moe_layer < layers());
  return model_layers_[static_cast<size_t>(moe_layer)];
}

bool ExpertLayout::complete() const {
  return expert_bytes_.size() == model_layers_.size() * static_cast<size_t>(experts_);
}

size_t ExpertLayout::index(int32_t moe_layer, int32_t expert) const {
  SM_ASSERT(moe_layer >= 0 && moe_layer < layers() && expert >= 0 && expert < experts_);
  const size_t i =
      static_cast<size_t>(moe_layer) * static_cast<size_t>(experts_) + static_cast<size_t>(expert);
  SM_ASSERT_MSG(i < expert_bytes_.size(), "expert not in the layout yet");
  return i;
}

std::string ExpertLayout::describe(int32_t moe_layer, int32_t expert) const {
  return fmt::format("layer {} (MoE layer {}) expert {}", model_layer(moe_layer), moe_layer,
                     expert);
}

void ExpertLayout::add_expert(std::span<const PartSource> parts) {
  SM_ASSERT_MSG(!complete(), "more experts than layers x experts");
  const auto i = static_cast<int32_t>(expert_bytes_.size());
  const int32_t m = i / std::max(experts_, 1), e = i % std::max(experts_, 1);
  uint64_t region = 0, total = 0;
  for (const PartSource& p : parts) {
    if (p.file >= 0) {
      SM_ASSERT(static_cast<size_t>(p.file) < files_.size());
      const ExpertFile& f = files_[static_cast<size_t>(p.file)];
      if (p.file_offset > f.size || p.bytes > f.size - p.file_offset) {
        fail(f.path.string(), describe(m, e),
             "expected bytes [{}, {}) inside the file, whose size is {}", p.file_offset,
             p.file_offset + p.bytes, f.size);
      }
    } else {
      SM_ASSERT_MSG(p.source != nullptr, "a part needs a file range or a host source");
    }
    ExpertPart part;
    part.file = p.file;
    part.file_offset = p.file_offset;
    part.bytes = p.bytes;
    part.source = p.source;
    const uint64_t head = p.file >= 0 ? p.file_offset % kDirectAlignment : 0;
    part.slot_offset = region + head;
    region += align_up(p.bytes + head);
    total += p.bytes;
    parts_.push_back(part);
  }
  first_part_.push_back(static_cast<uint32_t>(parts_.size()));
  expert_bytes_.push_back(total);
  slot_bytes_ = std::max(slot_bytes_, region);
}

std::span<const ExpertPart> ExpertLayout::parts(int32_t moe_layer, int32_t expert) const {
  const size_t i = index(moe_layer, expert);
  return std::span<const ExpertPart>(parts_).subspan(first_part_[i],
                                                     first_part_[i + 1] - first_part_[i]);
}

uint64_t ExpertLayout::expert_bytes(int32_t moe_layer, int32_t expert) const {
  return expert_bytes_[index(moe_layer, expert)];
}

bool ExpertLayout::on_disk() const {
  return std::all_of(parts_.begin(), parts_.end(), [](const ExpertPart& p) { return p.file >= 0; });
}

bool ExpertLayout::in_memory() const {
  return std::all_of(parts_.begin(), parts_.end(),
                     [](const ExpertPart& p) { return p.source != nullptr; });
}

}  // namespace steermoe::link
