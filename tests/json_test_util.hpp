// JSON in tests goes through common/json_input.hpp's out-of-line parse and dump functions, so
// that test files do not each instantiate nlohmann's parser and serialiser (seconds of compile
// time per file, most under ASan). Include this wherever a test prints a json value through
// gtest (EXPECT_EQ(j["x"], 1) prints both sides when it fails): the PrintTo below replaces
// gtest's fallback, nlohmann's operator<<, which instantiates the serialiser.
#pragma once

#include <istream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>

#include "common/json_input.hpp"

namespace steermoe::test_support {

// nlohmann::json::parse(in): the rest of the stream as one JSON document; throws
// nlohmann::json::parse_error when it is not one (an unopened file reads as empty).
inline nlohmann::json parse_json_stream(std::istream& in) {
  return parse_json_or_throw(
      std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()));
}

}  // namespace steermoe::test_support

// gtest finds PrintTo by argument-dependent lookup: namespace nlohmann encloses the inline
// namespace that holds basic_json, so it is associated with json and ordered_json. Prints what
// operator<< would (dump() without indentation).
namespace nlohmann {
inline void PrintTo(const json& value, std::ostream* os) {
  *os << steermoe::dump_json(value);
}
inline void PrintTo(const ordered_json& value, std::ostream* os) {
  *os << steermoe::dump_json(value);
}
}  // namespace nlohmann
