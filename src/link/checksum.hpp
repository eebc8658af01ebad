// A fast 64-bit checksum for verifying copied experts (not cryptographic): four lanes of
// multiply-xor-rotate over 8-byte little-endian words, then a tail and a final mix. A change of
// any single 8-byte word always changes the result (every step is a bijection of the lane).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "link/expert_layout.hpp"

namespace steermoe::link {

uint64_t checksum64(const std::byte* data, size_t size, uint64_t seed = 0);

// The checksum of expert (m, e)'s part bytes as they lie in `slot` (parts in order, padding
// excluded).
uint64_t expert_checksum(const ExpertLayout& layout, int32_t moe_layer, int32_t expert,
                         const std::byte* slot);

}  // namespace steermoe::link
