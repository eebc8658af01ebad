// The interpreter's dynamically typed values and the Python semantics templates can observe on
// them: str() and repr(), truthiness, equality, ordering, json.dumps (tojson). Shared by the
// parser (literals) and the renderer; internal to src/template (not part of the public API).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "template/jinja.hpp"

namespace steermoe::jinja::detail {

struct Value;
using Array = std::vector<Value>;
struct Object;
struct Args;
using Function = std::function<Value(Args&)>;

enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kArray, kObject, kFunction };

struct Value {
  Kind kind = Kind::kUndefined;
  bool b = false;
  int64_t i = 0;
  double f = 0.0;
  std::string s;
  std::shared_ptr<Array> a;
  std::shared_ptr<Object> o;
  std::shared_ptr<Function> fn;
  std::string undefined_name;  // for error messages

  // One factory per kind; the other members keep their defaults.
  static Value undefined(std::string name = "") { return Value{.undefined_name = std::move(name)}; }
  static Value none() { return Value{.kind = Kind::kNone}; }
  static Value boolean(bool x) { return Value{.kind = Kind::kBool, .b = x}; }
  static Value integer(int64_t x) { return Value{.kind = Kind::kInt, .i = x}; }
  static Value number(double x) { return Value{.kind = Kind::kFloat, .f = x}; }
  static Value string(std::string x) { return Value{.kind = Kind::kString, .s = std::move(x)}; }
  static Value array(Array x = {}) {
    return Value{.kind = Kind::kArray, .a = std::make_shared<Array>(std::move(x))};
  }
  static Value object(bool is_namespace = false);
  static Value function(Function f) {
    return Value{.kind = Kind::kFunction, .fn = std::make_shared<Function>(std::move(f))};
  }

  bool is_undefined() const { return kind == Kind::kUndefined; }
  bool is_number() const {
    return kind == Kind::kInt || kind == Kind::kFloat || kind == Kind::kBool;
  }
  double as_double() const {
    return kind == Kind::kFloat  ? f
           : kind == Kind::kBool ? (b ? 1.0 : 0.0)
                                 : static_cast<double>(i);
  }
  int64_t as_int() const { return kind == Kind::kBool ? (b ? 1 : 0) : i; }
};

struct Object {
  bool is_namespace = false;
  std::vector<std::pair<std::string, Value>> items;
  const Value* find(const std::string& key) const {
    for (const auto& [k, v] : items)
      if (k == key) return &v;
    return nullptr;
  }
  void set(const std::string& key, Value v) {
    for (auto& [k, x] : items) {
      if (k == key) {
        x = std::move(v);
        return;
      }
    }
    items.emplace_back(key, std::move(v));
  }
};

struct Args {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
  const Value* kwarg(const std::string& name) const {
    for (const auto& [k, v] : kw)
      if (k == name) return &v;
    return nullptr;
  }
  // Positional i, else keyword `name`, else nullptr.
  const Value* get(size_t i, const std::string& name) const {
    if (i < pos.size()) return &pos[i];
    return kwarg(name);
  }
};

// Throws TemplateError, prefixed with "line N: " when line > 0.
[[noreturn]] void error(int line, const std::string& what);

// The render context (a JSON object's values) as Values; nesting is bounded.
Value from_json(const nlohmann::ordered_json& j, int depth = 0);

inline bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

// UTF-8 code point boundaries of s (an invalid byte is one unit of its own).
std::vector<size_t> char_starts(const std::string& s);
size_t char_count(const std::string& s);

// Python's str() of a float (repr since Python 3: shortest round trip, "1e+16", "0.0001").
std::string python_float(double x);
// Python's str() and repr() of a value ("True", "None", "['a', 1]").
std::string str(const Value& v);
std::string repr(const Value& v);
bool truthy(const Value& v);
// Python's ==: numbers compare across int/float/bool, containers element by element.
bool equal(const Value& x, const Value& y, int depth = 0);
// -1, 0, 1; errors for values Python cannot order.
int compare(const Value& x, const Value& y, int line);
// Python's json.dumps(v, ensure_ascii=False, indent=indent) (transformers' tojson).
void to_json(const Value& v, int indent, int level, std::string& out, int line);

}  // namespace steermoe::jinja::detail
