// The renderer of the Jinja subset: walks the syntax tree with a stack of scopes and writes the
// output, following Python's semantics where templates can observe them. Every rendering is
// bounded by Limits (output size, steps, nesting). Internal to src/template.
//
// One class, two files: renderer.cpp runs statements and evaluates expressions; builtins.cpp holds
// what templates call by name (globals, filters, tests, string and dict methods).
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "template/jinja.hpp"
#include "template/parser.hpp"
#include "template/value.hpp"

namespace steermoe::jinja::detail {

enum class Flow { kNormal, kBreak, kContinue };

class Renderer {
 public:
  Renderer(const Limits& limits, std::string& out) : limits_(limits), out_(&out) {}

  // Renders `body` with `context`'s keys as variables (plus the globals of install_globals),
  // appending to the output string. Throws TemplateError.
  void run(const Body& body, const nlohmann::ordered_json& context);

 private:
  using Scope = std::unordered_map<std::string, Value>;

  struct DepthGuard {
    int& d;
    DepthGuard(int& depth, int max, int line) : d(depth) {
      if (++d > max) error(line, "the rendering nests too deeply");
    }
    ~DepthGuard() { --d; }
  };

  void step(int line) {
    if (++steps_ > limits_.max_steps) error(line, "the template ran too long");
  }
  void emit(const std::string& s, int line) {
    if (out_->size() + s.size() > limits_.max_output) error(line, "the rendered text is too long");
    *out_ += s;
  }

  // Statements (renderer.cpp).
  Value lookup(const std::string& name) const;
  Flow exec(const Body& body);
  void assign(const std::string& name, Value v) { scopes_.back()[name] = std::move(v); }
  void unpack(const std::vector<std::string>& targets, const Value& v, int line);
  Flow exec(const Node& n);
  Value call_macro(const Node& n, Args& a);
  Array iterate(const Value& v, int line);
  Flow exec_for(const Node& n);

  // Expressions (renderer.cpp).
  Value eval(const Expr& e);
  Args args(const Expr& e, size_t first);
  Value get_item(const Value& v, const Value& key, int line);
  Value slice(const Expr& e);
  Value get_attr(const Value& v, const std::string& name, int line);
  Value binary(const Expr& e);
  std::optional<Value> sequence_arithmetic(const std::string& op, const Value& l, const Value& r,
                                           int line);

  // Built-ins (builtins.cpp).
  void install_globals(Scope& g);
  Array split(const std::string& s, const Value* sep, int64_t maxsplit, int line);
  std::string replace(const std::string& s, const std::string& from, const std::string& to,
                      int64_t count, int line);
  Value method(const Value& self, const std::string& name, int line);
  Value string_method(const Value& self, const std::string& name, int line);
  Value string_search_method(const Value& self, const std::string& name, int line);
  Value dict_method(const Value& self, const std::string& name, int line);
  // A function value that calls f(*this, self, its arguments, line): a method bound to `self`.
  template <class F>
  Value bound_function(const Value& self, int line, F f) {
    return Value::function(
        [this, self, f, line](Args& a) -> Value { return f(*this, self, a, line); });
  }
  bool test(const std::string& name, const Value& v, Args& a, int line);
  std::vector<Value> select(const Array& items, Args& a, size_t first, bool want, bool by_attr,
                            int line);
  Value filter(const std::string& name, const Value& v, Args& a, int line);
  std::optional<Value> text_filter(const std::string& name, const Value& v, Args& a, int line);
  std::optional<Value> scalar_filter(const std::string& name, const Value& v, Args& a, int line);
  std::optional<Value> sequence_filter(const std::string& name, const Value& v, Args& a, int line);
  std::optional<Value> selection_filter(const std::string& name, const Value& v, Args& a, int line);

  const Limits& limits_;
  std::string* out_;
  std::vector<Scope> scopes_;
  size_t steps_ = 0;
  int depth_ = 0;
};

}  // namespace steermoe::jinja::detail
