// UTF-8 helpers for the server: validity, the length of a complete prefix (so a stream never
// splits a character), and code-point offsets (OpenAI's text_offset).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace steermoe::server {

// True if `s` is well-formed UTF-8 (no overlongs, surrogates or values above U+10FFFF).
bool valid_utf8(std::string_view s);

// Length of the longest prefix of `s` that does not end inside a multi-byte sequence that could
// still be completed by more bytes. Invalid bytes count as complete (they are emitted as they
// are and replaced by U+FFFD when serialized).
size_t complete_prefix(std::string_view s);

// Number of code points in `s` (every byte that is not a continuation byte starts one).
size_t code_points(std::string_view s);

// A token's bytes as a logprobs token string: the text itself when it is valid UTF-8, else
// OpenAI's spelling "bytes:\xe6\x97" (a byte-level token holding part of a character would
// otherwise serialize as U+FFFD: different tokens alike, and keys of top_logprobs colliding).
std::string token_string(std::string_view bytes);

}  // namespace steermoe::server
