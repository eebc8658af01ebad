// Per-layer f32 key/value cache: keys [positions][kv_heads * k_dim], values
// [positions][kv_heads * v_dim]. MLA models cache decompressed per-head keys and values (like
// transformers), so the attention kernel is the same for every family.
//
// Memory is reserved for the whole context but committed as it is used: the storage is an
// anonymous mapping (MAP_NORESERVE) whose pages are zero until first written, so a context of
// 32k positions costs only the positions a run actually fills (reading an untouched page maps
// the shared zero page). The full size is checked against the machine's memory first
// (common/memory_limit.hpp), with a message naming -c, so a huge context is refused up front
// instead of ending in std::bad_alloc or the OOM killer. No allocation happens after
// construction (decode stays allocation-free).
#pragma once

#include <fmt/format.h>
#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <new>
#include <utility>
#include <vector>

#include "common/memory_limit.hpp"

namespace steermoe::engine {

// A zero-initialised float array whose pages are committed on first write.
class LazyZeroBuffer {
 public:
  LazyZeroBuffer() = default;
  explicit LazyZeroBuffer(size_t floats) : bytes_(floats * sizeof(float)) {
    if (bytes_ == 0) return;
    void* p = ::mmap(nullptr, bytes_, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    data_ = static_cast<float*>(p);
  }
  LazyZeroBuffer(LazyZeroBuffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  LazyZeroBuffer& operator=(LazyZeroBuffer&& o) noexcept {
    if (this != &o) {
      release();
      data_ = std::exchange(o.data_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }
  LazyZeroBuffer(const LazyZeroBuffer&) = delete;
  LazyZeroBuffer& operator=(const LazyZeroBuffer&) = delete;
  ~LazyZeroBuffer() { release(); }
  float* data() const { return data_; }

 private:
  void release() noexcept {
    if (data_ != nullptr) ::munmap(data_, bytes_);
    data_ = nullptr;
  }
  float* data_ = nullptr;
  size_t bytes_ = 0;
};

class KvCache {
 public:
  KvCache() = default;
  // `skip[l]` != 0: layer l keeps no cache (Gated DeltaNet layers keep a recurrent state
  // instead); empty `skip`: every layer has one.
  KvCache(int layers, int positions, size_t k_width, size_t v_width,
          const std::vector<uint8_t>& skip = {})
      : positions_(positions), k_width_(k_width), v_width_(v_width) {
    uint64_t cached_layers = 0;
    for (int l = 0; l < layers; ++l)
      cached_layers += skip.empty() || skip[static_cast<size_t>(l)] == 0 ? 1 : 0;
    const uint64_t per_position = saturating_mul(static_cast<uint64_t>(k_width + v_width), 4);
    const uint64_t total = saturating_mul(
        saturating_mul(cached_layers, static_cast<uint64_t>(positions)), per_position);
    check_allocation(
        "engine", "context (-c)", total,
        fmt::format("a KV cache of {} positions x {} layers", positions, cached_layers),
        "expected a context that fits in memory (lower -c)");
    k_.reserve(static_cast<size_t>(layers));
    v_.reserve(static_cast<size_t>(layers));
    for (int l = 0; l < layers; ++l) {
      const bool skipped = !skip.empty() && skip[static_cast<size_t>(l)] != 0;
      k_.emplace_back(skipped ? 0 : static_cast<size_t>(positions) * k_width);
      v_.emplace_back(skipped ? 0 : static_cast<size_t>(positions) * v_width);
    }
  }
  int positions() const { return positions_; }
  size_t k_width() const { return k_width_; }
  size_t v_width() const { return v_width_; }
  float* k(int layer, int pos) {
    return k_[static_cast<size_t>(layer)].data() + static_cast<size_t>(pos) * k_width_;
  }
  float* v(int layer, int pos) {
    return v_[static_cast<size_t>(layer)].data() + static_cast<size_t>(pos) * v_width_;
  }

 private:
  int positions_ = 0;
  size_t k_width_ = 0, v_width_ = 0;
  std::vector<LazyZeroBuffer> k_, v_;
};

}  // namespace steermoe::engine
