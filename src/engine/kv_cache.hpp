// Per-layer f32 key/value cache: keys [positions][kv_heads * k_dim], values
// [positions][kv_heads * v_dim]. MLA models cache decompressed per-head keys and values (like
// transformers), so the attention kernel is the same for every family.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace steermoe::engine {

class KvCache {
 public:
  KvCache() = default;
  // `skip[l]` != 0: layer l keeps no cache (Gated DeltaNet layers keep a recurrent state
  // instead); empty `skip`: every layer has one.
  KvCache(int layers, int positions, size_t k_width, size_t v_width,
          const std::vector<uint8_t>& skip = {})
      : positions_(positions),
        k_width_(k_width),
        v_width_(v_width),
        k_(static_cast<size_t>(layers)),
        v_(static_cast<size_t>(layers)) {
    for (size_t l = 0; l < k_.size(); ++l) {
      if (!skip.empty() && skip[l] != 0) continue;
      k_[l].assign(static_cast<size_t>(positions) * k_width, 0.0f);
      v_[l].assign(static_cast<size_t>(positions) * v_width, 0.0f);
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
  std::vector<std::vector<float>> k_, v_;
};

}  // namespace steermoe::engine
