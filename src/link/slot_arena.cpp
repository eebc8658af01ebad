#include "link/slot_arena.hpp"

#include <cstdlib>
#include <utility>

#include "common/error.hpp"
#include "common/huge_pages.hpp"
#include "link/expert_layout.hpp"

namespace steermoe::link {

SlotArena::SlotArena(int32_t layers, int32_t slots_per_layer, uint64_t slot_bytes)
    : layers_(layers), slots_(slots_per_layer), slot_bytes_(align_up(slot_bytes)) {
  if (layers < 0 || slots_per_layer < 0)
    fail("slot arena", "size", "expected >= 0 layers and slots, got {} x {}", layers,
         slots_per_layer);
  const uint64_t total = total_bytes();
  if (total == 0) return;
  // Arenas of at least a huge page live in huge pages (common/huge_pages.hpp): compute reads
  // every executed expert's bytes from here once per token, and with 2 MiB pages the
  // OLMoE-1B-7B shape's compute with every expert in a slot took 30.6 ms/token against 34.8 with
  // 4 KiB pages (Q4_K_M, 2 threads, Intel Xeon).
  base_ = total >= kHugePageBytes
              ? allocate_huge_pages(total)
              : static_cast<std::byte*>(std::aligned_alloc(kDirectAlignment, total));
  if (base_ == nullptr)
    fail("slot arena", "allocation", "cannot allocate {} bytes ({} x {} slots of {} bytes)", total,
         layers, slots_per_layer, slot_bytes_);
}

SlotArena::SlotArena(SlotArena&& other) noexcept
    : base_(std::exchange(other.base_, nullptr)),
      layers_(std::exchange(other.layers_, 0)),
      slots_(std::exchange(other.slots_, 0)),
      slot_bytes_(std::exchange(other.slot_bytes_, 0)) {}

SlotArena& SlotArena::operator=(SlotArena&& other) noexcept {
  if (this != &other) {
    std::free(base_);
    base_ = std::exchange(other.base_, nullptr);
    layers_ = std::exchange(other.layers_, 0);
    slots_ = std::exchange(other.slots_, 0);
    slot_bytes_ = std::exchange(other.slot_bytes_, 0);
  }
  return *this;
}

SlotArena::~SlotArena() {
  std::free(base_);
}

std::byte* SlotArena::slot(int32_t layer, int32_t slot) const {
  SM_ASSERT(layer >= 0 && layer < layers_ && slot >= 0 && slot < slots_);
  return base_ + (static_cast<uint64_t>(layer) * static_cast<uint64_t>(slots_) +
                  static_cast<uint64_t>(slot)) *
                     slot_bytes_;
}

}  // namespace steermoe::link
