#include "server/utf8.hpp"

#include <cstdint>

namespace steermoe::server {

namespace {

// Length of the sequence a lead byte announces; 0 for a byte that cannot start one.
int sequence_length(uint8_t b) {
  if (b < 0x80) return 1;
  if (b >= 0xC2 && b <= 0xDF) return 2;
  if (b >= 0xE0 && b <= 0xEF) return 3;
  if (b >= 0xF0 && b <= 0xF4) return 4;
  return 0;
}

// Whether bytes s[i+1 ..] are valid continuations of the lead s[i] (checking as many as exist).
bool continuation_ok(std::string_view s, size_t i, int n) {
  const auto lead = static_cast<uint8_t>(s[i]);
  for (int k = 1; k < n && i + static_cast<size_t>(k) < s.size(); ++k) {
    const auto c = static_cast<uint8_t>(s[i + static_cast<size_t>(k)]);
    uint8_t lo = 0x80, hi = 0xBF;
    if (k == 1) {
      if (lead == 0xE0) lo = 0xA0;
      if (lead == 0xED) hi = 0x9F;
      if (lead == 0xF0) lo = 0x90;
      if (lead == 0xF4) hi = 0x8F;
    }
    if (c < lo || c > hi) return false;
  }
  return true;
}

}  // namespace

bool valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const int n = sequence_length(static_cast<uint8_t>(s[i]));
    if (n == 0 || i + static_cast<size_t>(n) > s.size() || !continuation_ok(s, i, n)) return false;
    i += static_cast<size_t>(n);
  }
  return true;
}

size_t complete_prefix(std::string_view s) {
  // Only the last up to 3 bytes can belong to an unfinished sequence.
  const size_t start = s.size() > 3 ? s.size() - 3 : 0;
  for (size_t i = start; i < s.size(); ++i) {
    const int n = sequence_length(static_cast<uint8_t>(s[i]));
    if (n >= 2 && i + static_cast<size_t>(n) > s.size() && continuation_ok(s, i, n)) return i;
  }
  return s.size();
}

size_t code_points(std::string_view s) {
  size_t n = 0;
  for (char c : s) n += (static_cast<uint8_t>(c) & 0xC0) != 0x80 ? 1 : 0;
  return n;
}

std::string token_string(std::string_view bytes) {
  if (valid_utf8(bytes)) return std::string(bytes);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "bytes:";
  for (const char c : bytes) {
    const auto b = static_cast<unsigned char>(c);
    out += "\\x";
    out += kHex[b >> 4];
    out += kHex[b & 15];
  }
  return out;
}

}  // namespace steermoe::server
