// Values: conversion from the JSON context and the Python semantics of str(), repr(),
// truthiness, equality, ordering and json.dumps that templates can observe.
#include "template/value.hpp"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <limits>

namespace steermoe::jinja::detail {

Value Value::object(bool is_namespace) {
  Value v;
  v.kind = Kind::kObject;
  v.o = std::make_shared<Object>();
  v.o->is_namespace = is_namespace;
  return v;
}

[[noreturn]] void error(int line, const std::string& what) {
  throw TemplateError(line > 0 ? fmt::format("line {}: {}", line, what) : what);
}

Value from_json(const nlohmann::ordered_json& j, int depth) {
  if (depth > 256) error(0, "the context nests too deeply");
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null:
      return Value::none();
    case nlohmann::ordered_json::value_t::boolean:
      return Value::boolean(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return Value::integer(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const auto u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return Value::number(static_cast<double>(u));
      }
      return Value::integer(static_cast<int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float:
      return Value::number(j.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return Value::string(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      Array a;
      for (const auto& x : j) a.push_back(from_json(x, depth + 1));
      return Value::array(std::move(a));
    }
    case nlohmann::ordered_json::value_t::object: {
      Value v = Value::object();
      for (const auto& [k, x] : j.items()) v.o->items.emplace_back(k, from_json(x, depth + 1));
      return v;
    }
    default:
      return Value::none();
  }
}

// UTF-8 code point boundaries of s (an invalid byte is one unit of its own).
std::vector<size_t> char_starts(const std::string& s) {
  std::vector<size_t> out;
  for (size_t i = 0; i < s.size(); ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80 || out.empty()) out.push_back(i);
  }
  return out;
}

size_t char_count(const std::string& s) {
  return char_starts(s).size();
}

std::string python_float(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::scientific);
  std::string sci(buf, r.ptr);
  // sci = [-]d[.ddd]e[+-]XX
  const size_t e = sci.find('e');
  std::string mant = sci.substr(0, e);
  const int exp = std::stoi(sci.substr(e + 1));
  bool neg = false;
  if (!mant.empty() && mant[0] == '-') {
    neg = true;
    mant.erase(0, 1);
  }
  std::string digits;
  for (char c : mant)
    if (c != '.') digits += c;
  std::string out;
  if (exp < -4 || exp >= 16) {
    out = digits.substr(0, 1);
    if (digits.size() > 1) {
      out += '.';
      out += digits.substr(1);
    }
    out += fmt::format("e{}{:02d}", exp < 0 ? '-' : '+', std::abs(exp));
  } else if (exp < 0) {
    out = "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
  } else {
    const auto int_len = static_cast<size_t>(exp + 1);
    if (digits.size() <= int_len) {
      out = digits + std::string(int_len - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, int_len) + "." + digits.substr(int_len);
    }
  }
  return neg ? "-" + out : out;
}

std::string str(const Value& v) {
  switch (v.kind) {
    case Kind::kUndefined:
      return "";
    case Kind::kNone:
      return "None";
    case Kind::kBool:
      return v.b ? "True" : "False";
    case Kind::kInt:
      return std::to_string(v.i);
    case Kind::kFloat:
      return python_float(v.f);
    case Kind::kString:
      return v.s;
    case Kind::kArray: {
      std::string out = "[";
      for (size_t k = 0; k < v.a->size(); ++k) out += (k ? ", " : "") + repr((*v.a)[k]);
      return out + "]";
    }
    case Kind::kObject: {
      if (v.o->is_namespace) return "<Namespace>";
      std::string out = "{";
      bool first = true;
      for (const auto& [k, x] : v.o->items) {
        out += (first ? "" : ", ") + repr(Value::string(k)) + ": " + repr(x);
        first = false;
      }
      return out + "}";
    }
    case Kind::kFunction:
      return "<function>";
  }
  return "";
}

std::string repr(const Value& v) {
  if (v.kind != Kind::kString) return str(v);
  const bool dq = v.s.find('\'') != std::string::npos && v.s.find('"') == std::string::npos;
  const char q = dq ? '"' : '\'';
  std::string out(1, q);
  for (char c : v.s) {
    if (c == q || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      out += fmt::format("\\x{:02x}", static_cast<unsigned char>(c));
    } else {
      out += c;
    }
  }
  return out + q;
}

bool truthy(const Value& v) {
  switch (v.kind) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return v.b;
    case Kind::kInt:
      return v.i != 0;
    case Kind::kFloat:
      return v.f != 0.0;
    case Kind::kString:
      return !v.s.empty();
    case Kind::kArray:
      return !v.a->empty();
    case Kind::kObject:
      return v.o->is_namespace || !v.o->items.empty();
    case Kind::kFunction:
      return true;
  }
  return false;
}

bool equal(const Value& x, const Value& y, int depth) {
  if (depth > 256) error(0, "comparison nests too deeply");
  if (x.is_number() && y.is_number()) {
    if (x.kind == Kind::kFloat || y.kind == Kind::kFloat) return x.as_double() == y.as_double();
    return x.as_int() == y.as_int();
  }
  if (x.kind != y.kind) return false;
  switch (x.kind) {
    case Kind::kUndefined:
    case Kind::kNone:
      return true;
    case Kind::kString:
      return x.s == y.s;
    case Kind::kArray:
      if (x.a->size() != y.a->size()) return false;
      for (size_t k = 0; k < x.a->size(); ++k)
        if (!equal((*x.a)[k], (*y.a)[k], depth + 1)) return false;
      return true;
    case Kind::kObject:
      if (x.o == y.o) return true;
      if (x.o->is_namespace || y.o->is_namespace) return false;
      if (x.o->items.size() != y.o->items.size()) return false;
      for (const auto& [k, v] : x.o->items) {
        const Value* w = y.o->find(k);
        if (!w || !equal(v, *w, depth + 1)) return false;
      }
      return true;
    case Kind::kFunction:
      return x.fn == y.fn;
    default:
      return false;
  }
}

// -1, 0, 1; errors for values Python cannot order.
int compare(const Value& x, const Value& y, int line) {
  if (x.is_number() && y.is_number()) {
    if (x.kind == Kind::kFloat || y.kind == Kind::kFloat) {
      const double a = x.as_double(), b = y.as_double();
      return a < b ? -1 : a > b ? 1 : 0;
    }
    return x.as_int() < y.as_int() ? -1 : x.as_int() > y.as_int() ? 1 : 0;
  }
  if (x.kind == Kind::kString && y.kind == Kind::kString) return x.s < y.s ? -1 : x.s > y.s ? 1 : 0;
  if (x.kind == Kind::kArray && y.kind == Kind::kArray) {
    for (size_t k = 0; k < x.a->size() && k < y.a->size(); ++k) {
      const int c = compare((*x.a)[k], (*y.a)[k], line);
      if (c != 0) return c;
    }
    return x.a->size() < y.a->size() ? -1 : x.a->size() > y.a->size() ? 1 : 0;
  }
  error(line, "cannot order these values");
}

std::string json_escape(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (u < 0x20) {
          out += fmt::format("\\u{:04x}", u);
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

namespace {

// A newline and `width` spaces, or nothing without indentation (indent < 0). Built by append:
// GCC 12 at -O3 reports a false -Wrestrict for "\n" + std::string(...) here.
std::string line_break(int indent, int width) {
  std::string s;
  if (indent >= 0) {
    s += '\n';
    s.append(static_cast<size_t>(width), ' ');
  }
  return s;
}

}  // namespace

// Python's json.dumps(v, ensure_ascii=False, indent=indent) (transformers' tojson).
void to_json(const Value& v, int indent, int level, std::string& out, int line) {
  if (level > 256) error(line, "tojson: the value nests too deeply");
  const std::string nl = line_break(indent, indent * (level + 1));
  const std::string nl_end = line_break(indent, indent * level);
  const std::string item_sep = indent >= 0 ? "," : ", ";
  switch (v.kind) {
    case Kind::kUndefined:
      error(line, "tojson: the value is undefined");
    case Kind::kNone:
      out += "null";
      return;
    case Kind::kBool:
      out += v.b ? "true" : "false";
      return;
    case Kind::kInt:
      out += std::to_string(v.i);
      return;
    case Kind::kFloat:
      out += std::isnan(v.f)   ? "NaN"
             : std::isinf(v.f) ? (v.f > 0 ? "Infinity" : "-Infinity")
                               : python_float(v.f);
      return;
    case Kind::kString:
      out += json_escape(v.s);
      return;
    case Kind::kArray:
      if (v.a->empty()) {
        out += "[]";
        return;
      }
      out += "[";
      for (size_t k = 0; k < v.a->size(); ++k) {
        out += (k ? item_sep : "") + nl;
        to_json((*v.a)[k], indent, level + 1, out, line);
      }
      out += nl_end + "]";
      return;
    case Kind::kObject: {
      if (v.o->is_namespace) error(line, "tojson: a namespace is not JSON serializable");
      if (v.o->items.empty()) {
        out += "{}";
        return;
      }
      out += "{";
      bool first = true;
      for (const auto& [k, x] : v.o->items) {
        out += (first ? "" : item_sep) + nl + json_escape(k) + ": ";
        to_json(x, indent, level + 1, out, line);
        first = false;
      }
      out += nl_end + "}";
      return;
    }
    case Kind::kFunction:
      error(line, "tojson: a function is not JSON serializable");
  }
}

}  // namespace steermoe::jinja::detail
