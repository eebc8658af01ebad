#include "tokenizer/byte_level.hpp"

#include <array>

namespace steermoe::tokenizer {
namespace {

// GPT-2 (openai/gpt-2 encoder.py bytes_to_unicode): bytes '!'..'~', 0xA1..0xAC and 0xAE..0xFF
// keep their own code point; the remaining 68 bytes get U+0100 + n in increasing byte order.
struct ByteMap {
  std::array<char32_t, 256> code_point{};
  std::array<std::string, 256> spelling;
  std::array<int16_t, 0x144> byte_of{};  // code points below U+0144 -> byte, -1 if unmapped

  ByteMap() {
    byte_of.fill(-1);
    char32_t next_extra = 0x100;
    for (int b = 0; b < 256; ++b) {
      const bool keeps_own = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      code_point[b] = keeps_own ? static_cast<char32_t>(b) : next_extra++;
      append_utf8(code_point[b], spelling[b]);
      byte_of[code_point[b]] = static_cast<int16_t>(b);
    }
  }
};

const ByteMap& byte_map() {
  static const ByteMap map;
  return map;
}

}  // namespace

const std::string& byte_to_unicode(uint8_t b) {
  return byte_map().spelling[b];
}

void append_byte_level(std::string_view bytes, std::string& out) {
  const ByteMap& map = byte_map();
  for (char c : bytes) out += map.spelling[static_cast<uint8_t>(c)];
}

std::string to_byte_level(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  append_byte_level(bytes, out);
  return out;
}

std::optional<uint8_t> unicode_to_byte(char32_t code_point) {
  const ByteMap& map = byte_map();
  if (code_point >= map.byte_of.size() || map.byte_of[code_point] < 0) return std::nullopt;
  return static_cast<uint8_t>(map.byte_of[code_point]);
}

std::string from_byte_level(std::string_view spelled) {
  std::string out;
  out.reserve(spelled.size());
  size_t pos = 0;
  while (pos < spelled.size()) {
    size_t length = utf8_sequence_length(spelled, pos);
    if (length == 0) return std::string(spelled);
    const std::optional<uint8_t> b = unicode_to_byte(decode_utf8(spelled, pos, length));
    if (!b) return std::string(spelled);
    out.push_back(static_cast<char>(*b));
    pos += length;
  }
  return out;
}

size_t utf8_sequence_length(std::string_view text, size_t pos) {
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(text[i]); };
  const uint8_t lead = byte(pos);
  if (lead < 0x80) return 1;
  size_t length = 0;
  char32_t min_value = 0;
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2, min_value = 0x80;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3, min_value = 0x800;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4, min_value = 0x10000;
  } else {
    return 0;  // continuation byte, overlong 2-byte lead, or beyond U+10FFFF
  }
  if (pos + length > text.size()) return 0;
  char32_t value = lead & (0x7F >> length);
  for (size_t i = 1; i < length; ++i) {
    if ((byte(pos + i) & 0xC0) != 0x80) return 0;
    value = (value << 6) | (byte(pos + i) & 0x3F);
  }
  if (value < min_value || value > 0x10FFFF || (value >= 0xD800 && value <= 0xDFFF)) return 0;
  return length;
}

std::optional<size_t> find_invalid_utf8(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t length = utf8_sequence_length(text, pos);
    if (length == 0) return pos;
    pos += length;
  }
  return std::nullopt;
}

char32_t decode_utf8(std::string_view text, size_t pos, size_t& length) {
  length = utf8_sequence_length(text, pos);
  if (length == 0) {
    length = 1;
    return 0xFFFD;
  }
  const uint8_t lead = static_cast<uint8_t>(text[pos]);
  if (length == 1) return lead;
  char32_t value = lead & (0x7F >> length);
  for (size_t i = 1; i < length; ++i)
    value = (value << 6) | (static_cast<uint8_t>(text[pos + i]) & 0x3F);
  return value;
}

void append_utf8(char32_t cp, std::string& out) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace steermoe::tokenizer
