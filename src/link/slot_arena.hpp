// The RAM of an expert cache: layers x slots_per_layer slots of slot_bytes each, one 4096-aligned
// allocation (every slot starts 4096-aligned, as O_DIRECT needs). Pages are touched only when a
// copy writes them, so resident memory grows with the slots actually filled.
#pragma once

#include <cstddef>
#include <cstdint>

namespace steermoe::link {

class SlotArena {
 public:
  SlotArena() = default;
  // slot_bytes is rounded up to a multiple of 4096. Throws steermoe::Error if the allocation
  // fails (naming the size).
  SlotArena(int32_t layers, int32_t slots_per_layer, uint64_t slot_bytes);
  SlotArena(SlotArena&& other) noexcept;
  SlotArena& operator=(SlotArena&& other) noexcept;
  SlotArena(const SlotArena&) = delete;
  SlotArena& operator=(const SlotArena&) = delete;
  ~SlotArena();

  std::byte* slot(int32_t layer, int32_t slot) const;
  int32_t layers() const { return layers_; }
  int32_t slots_per_layer() const { return slots_; }
  uint64_t slot_bytes() const { return slot_bytes_; }
  uint64_t total_bytes() const { return static_cast<uint64_t>(layers_) * slots_ * slot_bytes_; }

 private:
  std::byte* base_ = nullptr;
  int32_t layers_ = 0;
  int32_t slots_ = 0;
  uint64_t slot_bytes_ = 0;
};

}  // namespace steermoe::link
