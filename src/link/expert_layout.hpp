// Where every routed expert's bytes live (in the model file(s) and, when mapped, in host memory)
// and where they land in a cache slot. Pure data, shared by every byte-moving link: the disk link
// reads each part's file range, the emulated link copies it from `source`, and the engine finds
// the expert's matrices at the same slot offsets whichever link filled the slot.
//
// Slot layout ("aligned over-read into the slot"): O_DIRECT reads need a 4096-aligned file
// offset, length and memory address, and expert tensors are rarely 4096-aligned in a GGUF or
// safetensors file. Each part therefore owns a 4096-aligned region of the slot, sized
// round_up(bytes + file_offset % 4096, 4096); the disk link reads the aligned file range covering
// the part into the start of that region, so the part's first byte lands at
//   slot_offset = region_base + file_offset % 4096.
// A copy from memory writes exactly the part's bytes at the same slot_offset. No bounce buffer:
// the over-read costs at most 2 x 4 KiB per part.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

namespace steermoe::link {

inline constexpr uint64_t kDirectAlignment = 4096;

constexpr uint64_t align_down(uint64_t x) {
  return x / kDirectAlignment * kDirectAlignment;
}
constexpr uint64_t align_up(uint64_t x) {
  return (x + kDirectAlignment - 1) / kDirectAlignment * kDirectAlignment;
}

// One file holding expert bytes, with its size when the layout was made.
struct ExpertFile {
  std::filesystem::path path;
  uint64_t size = 0;
};

// One contiguous byte range of an expert (a gate, up or down matrix for the model's layouts).
struct ExpertPart {
  int32_t file = -1;                  // index into ExpertLayout::files(); -1: not in a file
  uint64_t file_offset = 0;           // offset in that file
  uint64_t bytes = 0;                 // length
  const std::byte* source = nullptr;  // the same bytes in host memory (mapping); may be null
  uint64_t slot_offset = 0;           // where the part's first byte lies in a slot

  // The 4096-aligned file range covering the part (what an O_DIRECT read fetches) and the slot
  // offset it is read to (4096-aligned).
  uint64_t read_begin() const { return align_down(file_offset); }
  uint64_t read_end() const { return align_up(file_offset + bytes); }
  uint64_t slot_read_offset() const { return slot_offset - (file_offset - read_begin()); }
};

// A part as the layout's maker describes it (slot offsets are computed by the layout).
struct PartSource {
  int32_t file = -1;
  uint64_t file_offset = 0;
  uint64_t bytes = 0;
  const std::byte* source = nullptr;
};

class ExpertLayout {
 public:
  ExpertLayout() = default;
  // `model_layers[m]` is the model layer of MoE layer m (for messages); `experts` per layer.
  ExpertLayout(std::vector<ExpertFile> files, std::vector<int32_t> model_layers, int32_t experts);

  // Appends the next expert, in order (MoE layer 0 expert 0, 0/1, ..., 1/0, ...); computes the
  // slot offsets by the rule above. Throws steermoe::Error if a part lies outside its file.
  void add_expert(std::span<const PartSource> parts);

  int32_t layers() const { return static_cast<int32_t>(model_layers_.size()); }
  int32_t experts() const { return experts_; }
  const std::vector<ExpertFile>& files() const { return files_; }
  int32_t model_layer(int32_t moe_layer) const;
  // True once every (layer, expert) was added.
  bool complete() const;

  std::span<const ExpertPart> parts(int32_t moe_layer, int32_t expert) const;
  // Sum of the part bytes of one expert (what a copy moves, padding excluded).
  uint64_t expert_bytes(int32_t moe_layer, int32_t expert) const;
  // Bytes one slot needs for any expert (a multiple of 4096).
  uint64_t slot_bytes() const { return slot_bytes_; }
  // Every part has a file range / a host source.
  bool on_disk() const;
  bool in_memory() const;

  // "layer L (MoE layer m) expert e", for messages.
  std::string describe(int32_t moe_layer, int32_t expert) const;

 private:
  size_t index(int32_t moe_layer, int32_t expert) const;

  std::vector<ExpertFile> files_;
  std::vector<int32_t> model_layers_;
  int32_t experts_ = 0;
  std::vector<ExpertPart> parts_;
  std::vector<uint32_t> first_part_{0};  // expert i's parts: [first_part_[i], first_part_[i+1])
  std::vector<uint64_t> expert_bytes_;
  uint64_t slot_bytes_ = 0;
};

}  // namespace steermoe::link
