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
#include <unistd.h>

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

  // Gives the whole pages from float `from` to the end back to the system: they read as zero
  // again and cost nothing until written (a long sequence's high-water mark, released).
  void release_from(size_t from) {
    const auto page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
    const size_t start = (from * sizeof(float) + page - 1) / page * page;
    if (data_ != nullptr && start < bytes_)
      ::madvise(reinterpret_cast<char*>(data_) + start, bytes_ - start, MADV_DONTNEED);
  }
  // Bytes of the buffer in memory (mincore).
  size_t resident_bytes() const {
    if (data_ == nullptr) return 0;
    const auto page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
    std::vector<unsigned char> in((bytes_ + page - 1) / page);
    if (::mincore(data_, bytes_, in.data()) != 0) return 0;
    size_t n = 0;
    for (unsigned char v : in) n += (v & 1) != 0 ? page : 0;
    return n;
  }

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
  // Positions from `position` on give their memory back (see LazyZeroBuffer::release_from);
  // attention never reads past the sequence, so they need no other clearing.
  void release_from(int position) {
    for (auto& b : k_) b.release_from(static_cast<size_t>(position) * k_width_);
    for (auto& b : v_) b.release_from(static_cast<size_t>(position) * v_width_);
  }
  size_t resident_bytes() const {
    size_t n = 0;
    for (const auto& b : k_) n += b.resident_bytes();
    for (const auto& b : v_) n += b.resident_bytes();
    return n;
  }
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
