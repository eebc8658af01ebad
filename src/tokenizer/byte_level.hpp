// GPT-2's byte-to-unicode map (every byte gets a printable code point so that BPE vocabularies
// are plain strings) and the small UTF-8 helpers the tokenizer needs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace steermoe::tokenizer {

// The UTF-8 spelling of the code point that byte `b` maps to (printable Latin-1 bytes map to
// themselves, the other 68 bytes to U+0100..U+0143 in byte order).
const std::string& byte_to_unicode(uint8_t b);

// Appends the byte-level spelling of `bytes` to `out`.
void append_byte_level(std::string_view bytes, std::string& out);
std::string to_byte_level(std::string_view bytes);

// Inverse map for one code point; nullopt if the code point is not in the map.
std::optional<uint8_t> unicode_to_byte(char32_t code_point);

// Decodes a byte-level spelled token back to bytes. If any character is outside the map the
// token is returned unchanged (what HF's ByteLevel decoder does).
std::string from_byte_level(std::string_view spelled);

// Length of the valid UTF-8 sequence starting at text[pos] (1..4), or 0 if the bytes there are
// not valid UTF-8 (overlong forms, surrogates and code points above U+10FFFF are invalid).
size_t utf8_sequence_length(std::string_view text, size_t pos);
// Offset of the first invalid byte, or nullopt if the whole text is valid UTF-8.
std::optional<size_t> find_invalid_utf8(std::string_view text);
// Decodes the (valid) sequence at text[pos]; sets `length`.
char32_t decode_utf8(std::string_view text, size_t pos, size_t& length);
void append_utf8(char32_t code_point, std::string& out);

}  // namespace steermoe::tokenizer
