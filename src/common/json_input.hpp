// The one way steermoe parses JSON from a file or a flag: the nesting depth is checked by a
// cheap scan before nlohmann::json builds (and later serialises or destroys) anything, so a
// hostile file cannot exhaust the stack, and parse errors become steermoe::Error naming the
// file. json_excerpt quotes a value in error messages without ever echoing more than a short,
// bounded prefix.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace steermoe {

// Deepest nesting of arrays/objects accepted in any JSON input (real files: tokenizer.json ~6,
// config.json ~3, meta.json 2).
constexpr int kMaxJsonDepth = 64;
// Longest value quoted in an error message.
constexpr size_t kJsonExcerptChars = 80;

// Throws steermoe::Error "<where>: JSON: nesting deeper than <max_depth> levels at byte N" when
// the text nests arrays/objects deeper than max_depth (strings are skipped correctly). O(n).
void check_json_depth(std::string_view text, const std::string& where,
                      int max_depth = kMaxJsonDepth);

// check_json_depth, then nlohmann::json::parse; a syntax error throws steermoe::Error
// "<where>: JSON: expected valid JSON (<parser message>)". NaN/Infinity literals are not JSON
// and are rejected; numbers beyond double range are too.
nlohmann::json parse_json(std::string_view text, const std::string& where,
                          int max_depth = kMaxJsonDepth);
nlohmann::ordered_json parse_ordered_json(std::string_view text, const std::string& where,
                                          int max_depth = kMaxJsonDepth);

// Reads a regular file (read_input_file) and parses it with parse_json.
nlohmann::json read_json_file(const std::string& path, const char* what);
nlohmann::ordered_json read_ordered_json_file(const std::string& path, const char* what);

// Thin out-of-line wrappers over nlohmann's parser and serialiser. They exist for compile time:
// every translation unit that calls json::parse or dump() itself instantiates the whole parser
// (about 11 s more per file under the ASan build's flags) or serialiser (about 7 s); through
// these only json_input.cpp does. Each behaves exactly as the nlohmann call it names, errors
// and exceptions included; none checks the nesting depth (parse_json above does). Mind the type:
// a json result assigned to an ordered_json converts silently and loses the key order.

// nlohmann::json::parse(text, nullptr, false): the value, or a discarded value (is_discarded())
// when the text is not valid JSON.
nlohmann::json parse_json_or_discarded(std::string_view text);
nlohmann::ordered_json parse_ordered_json_or_discarded(std::string_view text);
// nlohmann::json::parse(text): throws nlohmann::json::parse_error (out_of_range for numbers
// beyond double range) rather than steermoe::Error.
nlohmann::json parse_json_or_throw(std::string_view text);
nlohmann::ordered_json parse_ordered_json_or_throw(std::string_view text);
// nlohmann::json::parse(text, callback): throws as parse_json_or_throw.
nlohmann::json parse_json_with_callback(std::string_view text,
                                        const nlohmann::json::parser_callback_t& callback);
// value.dump(indent, indent_char, ensure_ascii, error_handler); also what `os << value` writes
// (with indent = os.width() when that is positive).
std::string dump_json(
    const nlohmann::json& value, int indent = -1, char indent_char = ' ', bool ensure_ascii = false,
    nlohmann::json::error_handler_t error_handler = nlohmann::json::error_handler_t::strict);
std::string dump_json(const nlohmann::ordered_json& value, int indent = -1, char indent_char = ' ',
                      bool ensure_ascii = false,
                      nlohmann::ordered_json::error_handler_t error_handler =
                          nlohmann::ordered_json::error_handler_t::strict);

// A short JSON rendering of `value` for error messages: at most max_chars characters (then
// "..." and the type), built without serialising the whole value.
std::string json_excerpt(const nlohmann::json& value, size_t max_chars = kJsonExcerptChars);
std::string json_excerpt(const nlohmann::ordered_json& value,
                         size_t max_chars = kJsonExcerptChars);

}  // namespace steermoe
