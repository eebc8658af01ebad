#include "common/json_input.hpp"

#include "common/error.hpp"
#include "common/input_file.hpp"

namespace steermoe {
namespace {

template <typename Json>
Json parse_checked(std::string_view text, const std::string& where, int max_depth) {
  check_json_depth(text, where, max_depth);
  try {
    return Json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::exception& e) {
    std::string message = e.what();
    if (message.size() > 200) message = message.substr(0, 200) + "...";
    fail(where, "JSON", "expected valid JSON ({})", message);
  }
}

// Appends a bounded rendering of `v` to `out`; stops once out reaches `limit` characters.
template <typename Json>
void excerpt_into(const Json& v, std::string& out, size_t limit) {
  if (out.size() >= limit) return;
  if (v.is_array()) {
    out += '[';
    bool first = true;
    for (const auto& item : v) {
      if (out.size() >= limit) return;
      if (!first) out += ',';
      first = false;
      excerpt_into(item, out, limit);
    }
    out += ']';
  } else if (v.is_object()) {
    out += '{';
    bool first = true;
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (out.size() >= limit) return;
      if (!first) out += ',';
      first = false;
      const std::string& key = it.key();
      // Keys too may hold invalid UTF-8 (found by fuzz_trace_meta): replace, never throw.
      out += Json(key.substr(0, limit))
                 .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      out += ':';
      excerpt_into(it.value(), out, limit);
    }
    out += '}';
  } else if (v.is_string()) {
    const auto& s = v.template get_ref<const std::string&>();
    // Only a prefix is serialised; replace invalid UTF-8 rather than throw.
    out += Json(s.substr(0, limit)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  } else {
    out += v.dump();
  }
}

template <typename Json>
std::string excerpt_of(const Json& value, size_t max_chars) {
  std::string out;
  excerpt_into(value, out, max_chars + 1);
  if (out.size() > max_chars) {
    out.resize(max_chars);
    out += fmt::format("... ({}, truncated)", value.type_name());
  }
  return out;
}

}  // namespace

void check_json_depth(std::string_view text, const std::string& where, int max_depth) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;  // skip the escaped character
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    switch (c) {
      case '"':
        in_string = true;
        break;
      case '[':
      case '{':
        if (++depth > max_depth) {
          fail(where, "JSON", "expected arrays/objects nested at most {} levels deep, found deeper "
               "nesting at byte {}", max_depth, i);
        }
        break;
      case ']':
      case '}':
        if (depth > 0) --depth;
        break;
      default:
        break;
    }
  }
}

nlohmann::json parse_json(std::string_view text, const std::string& where, int max_depth) {
  return parse_checked<nlohmann::json>(text, where, max_depth);
}

nlohmann::ordered_json parse_ordered_json(std::string_view text, const std::string& where,
                                          int max_depth) {
  return parse_checked<nlohmann::ordered_json>(text, where, max_depth);
}

nlohmann::json read_json_file(const std::string& path, const char* what) {
  return parse_json(read_input_file(path, what, kMaxJsonFileBytes), path);
}

nlohmann::ordered_json read_ordered_json_file(const std::string& path, const char* what) {
  return parse_ordered_json(read_input_file(path, what, kMaxJsonFileBytes), path);
}

nlohmann::json parse_json_or_discarded(std::string_view text) {
  return nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
}

nlohmann::ordered_json parse_ordered_json_or_discarded(std::string_view text) {
  return nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
}

nlohmann::json parse_json_or_throw(std::string_view text) {
  return nlohmann::json::parse(text);
}

nlohmann::ordered_json parse_ordered_json_or_throw(std::string_view text) {
  return nlohmann::ordered_json::parse(text);
}

nlohmann::json parse_json_with_callback(std::string_view text,
                                        const nlohmann::json::parser_callback_t& callback) {
  return nlohmann::json::parse(text.begin(), text.end(), callback);
}

std::string dump_json(const nlohmann::json& value, int indent, char indent_char, bool ensure_ascii,
                      nlohmann::json::error_handler_t error_handler) {
  return value.dump(indent, indent_char, ensure_ascii, error_handler);
}

std::string dump_json(const nlohmann::ordered_json& value, int indent, char indent_char,
                      bool ensure_ascii, nlohmann::ordered_json::error_handler_t error_handler) {
  return value.dump(indent, indent_char, ensure_ascii, error_handler);
}

std::string json_excerpt(const nlohmann::json& value, size_t max_chars) {
  return excerpt_of(value, max_chars);
}

std::string json_excerpt(const nlohmann::ordered_json& value, size_t max_chars) {
  return excerpt_of(value, max_chars);
}

}  // namespace steermoe
