#include "link/checksum.hpp"

#include <bit>
#include <cstring>

namespace steermoe::link {
namespace {

constexpr uint64_t kMul1 = 0x9E3779B185EBCA87ull;
constexpr uint64_t kMul2 = 0xC2B2AE3D27D4EB4Full;

uint64_t load64(const std::byte* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof v);
  return v;  // the project targets little-endian machines
}

uint64_t lane_step(uint64_t lane, uint64_t word) {
  lane ^= word;
  lane *= kMul1;
  return std::rotl(lane, 31);
}

uint64_t finalize(uint64_t h) {
  h ^= h >> 33;
  h *= kMul2;
  h ^= h >> 29;
  h *= kMul1;
  h ^= h >> 32;
  return h;
}

}  // namespace

uint64_t checksum64(const std::byte* data, size_t size, uint64_t seed) {
  uint64_t a = seed + kMul1, b = seed + kMul2, c = seed ^ kMul1, d = seed ^ kMul2;
  size_t i = 0;
  for (; i + 32 <= size; i += 32) {
    a = lane_step(a, load64(data + i));
    b = lane_step(b, load64(data + i + 8));
    c = lane_step(c, load64(data + i + 16));
    d = lane_step(d, load64(data + i + 24));
  }
  for (; i + 8 <= size; i += 8) a = lane_step(a, load64(data + i));
  uint64_t tail = 0;
  for (size_t k = 0; i < size; ++i, ++k) tail |= static_cast<uint64_t>(data[i]) << (8 * k);
  b = lane_step(b, tail);
  // Each lane goes through a bijection before being combined, so a change in one lane always
  // changes the sum.
  uint64_t h = finalize(a) + std::rotl(finalize(b), 17) + std::rotl(finalize(c), 29) +
               std::rotl(finalize(d), 43);
  return finalize(h ^ static_cast<uint64_t>(size));
}

uint64_t expert_checksum(const ExpertLayout& layout, int32_t moe_layer, int32_t expert,
                         const std::byte* slot) {
  uint64_t h = 0;
  for (const ExpertPart& p : layout.parts(moe_layer, expert))
    h = checksum64(slot + p.slot_offset, static_cast<size_t>(p.bytes), h);
  return h;
}

}  // namespace steermoe::link
