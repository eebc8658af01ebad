// The renderer's statements (text, output, if, for with the loop variable, set, macros, break and
// continue) and expressions (names, attributes, items, slices, calls, operators).
#include "template/renderer.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

namespace steermoe::jinja::detail {
namespace {

// A negative index counts from the end (Python).
int64_t norm_index(int64_t k, int64_t len) {
  return k < 0 ? k + len : k;
}

// Python's int arithmetic, with overflow an error; nullopt for what Python computes in float (/,
// a negative power).
std::optional<Value> integer_arithmetic(const std::string& op, int64_t a, int64_t b, int line) {
  int64_t out = 0;
  if (op == "+") {
    if (__builtin_add_overflow(a, b, &out)) error(line, "integer overflow");
    return Value::integer(out);
  }
  if (op == "-") {
    if (__builtin_sub_overflow(a, b, &out)) error(line, "integer overflow");
    return Value::integer(out);
  }
  if (op == "*") {
    if (__builtin_mul_overflow(a, b, &out)) error(line, "integer overflow");
    return Value::integer(out);
  }
  if (op == "//" || op == "%") {
    if (b == 0) error(line, "integer division or modulo by zero");
    if (a == std::numeric_limits<int64_t>::min() && b == -1) error(line, "integer overflow");
    int64_t q = a / b, m = a % b;
    if (m != 0 && ((m < 0) != (b < 0))) {
      --q;
      m += b;
    }
    return Value::integer(op == "//" ? q : m);
  }
  if (op == "**" && b >= 0) {
    int64_t acc = 1;
    for (int64_t k = 0; k < b; ++k) {
      if (__builtin_mul_overflow(acc, a, &acc)) error(line, "integer overflow");
      if (acc == 0 || acc == 1) break;
      if (acc == -1) {
        acc = (b % 2 == 0) ? 1 : (a == -1 ? -1 : acc);
        break;
      }
    }
    return Value::integer(acc);
  }
  return std::nullopt;
}

// Python's float arithmetic: // floors, % takes the sign of the divisor.
Value float_arithmetic(const std::string& op, double a, double b, int line) {
  if (op == "+") return Value::number(a + b);
  if (op == "-") return Value::number(a - b);
  if (op == "*") return Value::number(a * b);
  if (op == "/") {
    if (b == 0.0) error(line, "division by zero");
    return Value::number(a / b);
  }
  if (op == "//") {
    if (b == 0.0) error(line, "float floor division by zero");
    return Value::number(std::floor(a / b));
  }
  if (op == "%") {
    if (b == 0.0) error(line, "float modulo by zero");
    double m = std::fmod(a, b);
    if (m != 0.0 && ((m < 0) != (b < 0))) m += b;
    return Value::number(m);
  }
  if (op == "**") return Value::number(std::pow(a, b));
  error(line, "unsupported operator " + op);
}

}  // namespace

void Renderer::run(const Body& body, const nlohmann::ordered_json& context) {
  scopes_.emplace_back();
  auto& g = scopes_.back();
  install_globals(g);
  if (context.is_object()) {
    for (const auto& [k, v] : context.items()) g[k] = from_json(v);
  }
  exec(body);
}

Value Renderer::lookup(const std::string& name) const {
  for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
    auto f = it->find(name);
    if (f != it->end()) return f->second;
  }
  return Value::undefined(name);
}

Flow Renderer::exec(const Body& body) {
  for (const auto& n : body) {
    const Flow f = exec(*n);
    if (f != Flow::kNormal) return f;
  }
  return Flow::kNormal;
}

void Renderer::unpack(const std::vector<std::string>& targets, const Value& v, int line) {
  if (targets.size() == 1) {
    assign(targets[0], v);
    return;
  }
  Array items = iterate(v, line);
  if (items.size() != targets.size()) {
    error(line, fmt::format("cannot unpack {} values into {} names", items.size(), targets.size()));
  }
  for (size_t k = 0; k < targets.size(); ++k) assign(targets[k], items[k]);
}

Flow Renderer::exec(const Node& n) {
  step(n.line);
  switch (n.kind) {
    case NK::kText:
      emit(n.text, n.line);
      return Flow::kNormal;
    case NK::kOutput:
      emit(str(eval(*n.expr)), n.line);
      return Flow::kNormal;
    case NK::kIf:
      for (const auto& [cond, body] : n.branches) {
        if (truthy(eval(*cond))) return exec(body);
      }
      return exec(n.else_body);
    case NK::kFor:
      return exec_for(n);
    case NK::kSet: {
      Value v = eval(*n.expr);
      if (n.attr_target) {
        Value ns = lookup(n.targets[0]);
        if (ns.kind != Kind::kObject || !ns.o->is_namespace) {
          error(n.line, "cannot assign an attribute of '" + n.targets[0] + "' (not a namespace)");
        }
        ns.o->set(n.targets[1], std::move(v));
      } else {
        unpack(n.targets, v, n.line);
      }
      return Flow::kNormal;
    }
    case NK::kSetBlock: {
      std::string captured;
      std::string* saved = out_;
      out_ = &captured;
      try {
        exec(n.body);
      } catch (...) {
        out_ = saved;
        throw;
      }
      out_ = saved;
      assign(n.targets[0], Value::string(std::move(captured)));
      return Flow::kNormal;
    }
    case NK::kMacro: {
      const Node* node = &n;
      assign(n.targets[0], Value::function([this, node](Args& a) { return call_macro(*node, a); }));
      return Flow::kNormal;
    }
    case NK::kBreak:
      return Flow::kBreak;
    case NK::kContinue:
      return Flow::kContinue;
  }
  return Flow::kNormal;
}

Value Renderer::call_macro(const Node& n, Args& a) {
  DepthGuard g(depth_, limits_.max_depth, n.line);
  if (a.pos.size() > n.params.size()) error(n.line, "too many arguments to macro " + n.targets[0]);
  Scope scope;
  for (size_t k = 0; k < n.params.size(); ++k) {
    const auto& [pname, def] = n.params[k];
    if (k < a.pos.size()) {
      scope[pname] = a.pos[k];
    } else if (const Value* kv = a.kwarg(pname)) {
      scope[pname] = *kv;
    } else if (def) {
      scope[pname] = eval(*def);
    } else {
      scope[pname] = Value::undefined(pname);
    }
  }
  std::string captured;
  std::string* saved = out_;
  out_ = &captured;
  scopes_.push_back(std::move(scope));
  try {
    exec(n.body);
  } catch (...) {
    scopes_.pop_back();
    out_ = saved;
    throw;
  }
  scopes_.pop_back();
  out_ = saved;
  if (out_->size() + captured.size() > limits_.max_output)
    error(n.line, "the rendered text is too long");
  return Value::string(std::move(captured));
}

Array Renderer::iterate(const Value& v, int line) {
  switch (v.kind) {
    case Kind::kUndefined:
      return {};
    case Kind::kArray:
      return *v.a;
    case Kind::kObject: {
      if (v.o->is_namespace) error(line, "a namespace is not iterable");
      Array keys;
      for (const auto& [k, x] : v.o->items) keys.push_back(Value::string(k));
      return keys;
    }
    case Kind::kString: {
      Array chars;
      const auto starts = char_starts(v.s);
      for (size_t k = 0; k < starts.size(); ++k) {
        const size_t end = k + 1 < starts.size() ? starts[k + 1] : v.s.size();
        chars.push_back(Value::string(v.s.substr(starts[k], end - starts[k])));
      }
      return chars;
    }
    default:
      error(line, "value is not iterable");
  }
}

Flow Renderer::exec_for(const Node& n) {
  DepthGuard g(depth_, limits_.max_depth, n.line);
  Array items = iterate(eval(*n.expr), n.line);
  if (n.filter) {
    Array kept;
    for (const Value& item : items) {
      scopes_.emplace_back();
      try {
        unpack(n.targets, item, n.line);
        if (truthy(eval(*n.filter))) kept.push_back(item);
      } catch (...) {
        scopes_.pop_back();
        throw;
      }
      scopes_.pop_back();
    }
    items = std::move(kept);
  }
  if (items.empty()) return exec(n.else_body);
  const auto len = static_cast<int64_t>(items.size());
  for (int64_t k = 0; k < len; ++k) {
    step(n.line);
    Value loop = Value::object();
    loop.o->items = {
        {"index", Value::integer(k + 1)},
        {"index0", Value::integer(k)},
        {"revindex", Value::integer(len - k)},
        {"revindex0", Value::integer(len - k - 1)},
        {"first", Value::boolean(k == 0)},
        {"last", Value::boolean(k == len - 1)},
        {"length", Value::integer(len)},
        {"depth", Value::integer(1)},
        {"depth0", Value::integer(0)},
        {"previtem", k > 0 ? items[static_cast<size_t>(k - 1)] : Value::undefined("previtem")},
        {"nextitem",
         k + 1 < len ? items[static_cast<size_t>(k + 1)] : Value::undefined("nextitem")}};
    scopes_.emplace_back();
    Flow f = Flow::kNormal;
    try {
      scopes_.back()["loop"] = loop;
      unpack(n.targets, items[static_cast<size_t>(k)], n.line);
      f = exec(n.body);
    } catch (...) {
      scopes_.pop_back();
      throw;
    }
    scopes_.pop_back();
    if (f == Flow::kBreak) break;
  }
  return Flow::kNormal;
}

Value Renderer::eval(const Expr& e) {
  DepthGuard g(depth_, limits_.max_depth, e.line);
  step(e.line);
  switch (e.kind) {
    case EK::kLiteral:
      return e.value;
    case EK::kName:
      return lookup(e.name);
    case EK::kAttr:
      return get_attr(eval(*e.kids[0]), e.name, e.line);
    case EK::kItem:
      return get_item(eval(*e.kids[0]), eval(*e.kids[1]), e.line);
    case EK::kSlice:
      return slice(e);
    case EK::kCall: {
      Value f = eval(*e.kids[0]);
      if (f.kind != Kind::kFunction) {
        error(e.line, f.is_undefined() ? "'" + f.undefined_name + "' is undefined"
                                       : "value is not callable");
      }
      Args a = args(e, 1);
      return (*f.fn)(a);
    }
    case EK::kFilter: {
      Value v = eval(*e.kids[0]);
      Args a = args(e, 1);
      return filter(e.name, v, a, e.line);
    }
    case EK::kTest: {
      Value v = eval(*e.kids[0]);
      Args a = args(e, 1);
      const bool r = test(e.name, v, a, e.line);
      return Value::boolean(e.negated ? !r : r);
    }
    case EK::kNeg: {
      Value v = eval(*e.kids[0]);
      if (v.kind == Kind::kFloat) return Value::number(-v.f);
      if (v.kind == Kind::kInt || v.kind == Kind::kBool) {
        if (v.as_int() == std::numeric_limits<int64_t>::min()) error(e.line, "integer overflow");
        return Value::integer(-v.as_int());
      }
      error(e.line, "bad operand for unary -");
    }
    case EK::kPos: {
      Value v = eval(*e.kids[0]);
      if (!v.is_number()) error(e.line, "bad operand for unary +");
      return v.kind == Kind::kBool ? Value::integer(v.as_int()) : v;
    }
    case EK::kNot:
      return Value::boolean(!truthy(eval(*e.kids[0])));
    case EK::kAnd: {
      Value l = eval(*e.kids[0]);
      return truthy(l) ? eval(*e.kids[1]) : l;
    }
    case EK::kOr: {
      Value l = eval(*e.kids[0]);
      return truthy(l) ? l : eval(*e.kids[1]);
    }
    case EK::kCond:
      if (truthy(eval(*e.kids[1]))) return eval(*e.kids[0]);
      return e.kids[2] ? eval(*e.kids[2]) : Value::undefined();
    case EK::kList: {
      Array a;
      for (const auto& k : e.kids) a.push_back(eval(*k));
      return Value::array(std::move(a));
    }
    case EK::kDict: {
      Value d = Value::object();
      for (size_t k = 0; k + 1 < e.kids.size(); k += 2) {
        Value key = eval(*e.kids[k]);
        if (key.kind != Kind::kString) error(e.line, "dict keys must be strings");
        d.o->set(key.s, eval(*e.kids[k + 1]));
      }
      return d;
    }
    case EK::kBinary:
      return binary(e);
  }
  return Value::undefined();
}

Args Renderer::args(const Expr& e, size_t first) {
  Args a;
  for (size_t k = first; k < e.kids.size(); ++k) a.pos.push_back(eval(*e.kids[k]));
  for (const auto& [name, x] : e.kwargs) a.kw.emplace_back(name, eval(*x));
  return a;
}

Value Renderer::get_item(const Value& v, const Value& key, int line) {
  if (v.is_undefined()) error(line, "'" + v.undefined_name + "' is undefined");
  if (v.kind == Kind::kArray || v.kind == Kind::kString) {
    if (key.kind != Kind::kInt && key.kind != Kind::kBool) {
      if (key.kind == Kind::kString) return get_attr(v, key.s, line);
      error(line, "indices must be integers");
    }
    if (v.kind == Kind::kArray) {
      const auto len = static_cast<int64_t>(v.a->size());
      const int64_t k = norm_index(key.as_int(), len);
      if (k < 0 || k >= len) return Value::undefined("item");
      return (*v.a)[static_cast<size_t>(k)];
    }
    const auto starts = char_starts(v.s);
    const auto len = static_cast<int64_t>(starts.size());
    const int64_t k = norm_index(key.as_int(), len);
    if (k < 0 || k >= len) return Value::undefined("item");
    const size_t b = starts[static_cast<size_t>(k)];
    const size_t end = k + 1 < len ? starts[static_cast<size_t>(k + 1)] : v.s.size();
    return Value::string(v.s.substr(b, end - b));
  }
  if (v.kind == Kind::kObject) {
    if (key.kind == Kind::kString) {
      if (const Value* x = v.o->find(key.s)) return *x;
      return Value::undefined(key.s);
    }
    return Value::undefined("item");
  }
  if (v.kind == Kind::kNone) error(line, "None has no items");
  return Value::undefined("item");
}

Value Renderer::slice(const Expr& e) {
  Value v = eval(*e.kids[0]);
  auto part = [&](int k) -> std::optional<int64_t> {
    if (!e.kids[static_cast<size_t>(k)]) return std::nullopt;
    Value x = eval(*e.kids[static_cast<size_t>(k)]);
    if (x.kind == Kind::kNone) return std::nullopt;
    if (x.kind != Kind::kInt && x.kind != Kind::kBool)
      error(e.line, "slice indices must be integers");
    return x.as_int();
  };
  const auto a = part(1), b = part(2), c = part(3);
  const int64_t stepv = c.value_or(1);
  if (stepv == 0) error(e.line, "slice step cannot be zero");
  std::vector<size_t> starts;
  int64_t len = 0;
  if (v.kind == Kind::kArray) {
    len = static_cast<int64_t>(v.a->size());
  } else if (v.kind == Kind::kString) {
    starts = char_starts(v.s);
    len = static_cast<int64_t>(starts.size());
  } else {
    error(e.line, "value cannot be sliced");
  }
  auto clampi = [&](std::optional<int64_t> x, int64_t def_pos, int64_t def_neg) {
    if (!x) return stepv > 0 ? def_pos : def_neg;
    int64_t k = *x;
    if (k < 0) k += len;
    if (stepv > 0) return std::clamp<int64_t>(k, 0, len);
    return std::clamp<int64_t>(k, -1, len - 1);
  };
  const int64_t lo = clampi(a, 0, len - 1), hi = clampi(b, len, -1);
  std::vector<int64_t> picks;
  for (int64_t k = lo; stepv > 0 ? k < hi : k > hi; k += stepv) {
    step(e.line);
    picks.push_back(k);
  }
  if (v.kind == Kind::kArray) {
    Array out;
    for (int64_t k : picks) out.push_back((*v.a)[static_cast<size_t>(k)]);
    return Value::array(std::move(out));
  }
  std::string out;
  for (int64_t k : picks) {
    const size_t bpos = starts[static_cast<size_t>(k)];
    const size_t end = k + 1 < len ? starts[static_cast<size_t>(k + 1)] : v.s.size();
    out += v.s.substr(bpos, end - bpos);
  }
  return Value::string(std::move(out));
}

Value Renderer::get_attr(const Value& v, const std::string& name, int line) {
  if (v.is_undefined())
    error(line, "'" + v.undefined_name + "' is undefined (reading ." + name + ")");
  if (v.kind == Kind::kObject) {
    if (!v.o->is_namespace) {
      Value m = method(v, name, line);
      if (!m.is_undefined()) return m;
    }
    if (const Value* x = v.o->find(name)) return *x;
    return Value::undefined(name);
  }
  if (v.kind == Kind::kNone) error(line, "None has no attribute '" + name + "'");
  return method(v, name, line);
}

Value Renderer::binary(const Expr& e) {
  const std::string& op = e.name;
  Value l = eval(*e.kids[0]);
  Value r = eval(*e.kids[1]);
  const int line = e.line;
  if (op == "==") return Value::boolean(equal(l, r));
  if (op == "!=") return Value::boolean(!equal(l, r));
  if (op == "<") return Value::boolean(compare(l, r, line) < 0);
  if (op == ">") return Value::boolean(compare(l, r, line) > 0);
  if (op == "<=") return Value::boolean(compare(l, r, line) <= 0);
  if (op == ">=") return Value::boolean(compare(l, r, line) >= 0);
  if (op == "in") {
    bool found = false;
    if (r.kind == Kind::kString) {
      if (l.kind != Kind::kString) error(line, "'in <string>' needs a string on the left");
      found = r.s.find(l.s) != std::string::npos;
    } else if (r.kind == Kind::kArray) {
      for (const Value& x : *r.a) {
        if (equal(l, x)) {
          found = true;
          break;
        }
      }
    } else if (r.kind == Kind::kObject) {
      found = l.kind == Kind::kString && r.o->find(l.s) != nullptr;
    } else if (r.is_undefined()) {
      found = false;
    } else {
      error(line, "argument of 'in' is not a container");
    }
    return Value::boolean(e.negated ? !found : found);
  }
  if (op == "~") {
    std::string s = str(l) + str(r);
    if (s.size() > limits_.max_output) error(line, "string too long");
    return Value::string(std::move(s));
  }
  if (l.is_undefined() || r.is_undefined()) {
    error(line, "'" + (l.is_undefined() ? l.undefined_name : r.undefined_name) + "' is undefined");
  }
  if (auto s = sequence_arithmetic(op, l, r, line)) return *s;
  if (!l.is_number() || !r.is_number()) {
    error(line, "unsupported operand types for " + op);
  }
  if (l.kind != Kind::kFloat && r.kind != Kind::kFloat) {
    if (auto i = integer_arithmetic(op, l.as_int(), r.as_int(), line)) return *i;
  }
  return float_arithmetic(op, l.as_double(), r.as_double(), line);
}

// + and * on strings and lists: concatenation and repetition, bounded by the output limit.
std::optional<Value> Renderer::sequence_arithmetic(const std::string& op, const Value& l,
                                                   const Value& r, int line) {
  if (op == "+") {
    if (l.kind == Kind::kString && r.kind == Kind::kString) {
      if (l.s.size() + r.s.size() > limits_.max_output) error(line, "string too long");
      return Value::string(l.s + r.s);
    }
    if (l.kind == Kind::kArray && r.kind == Kind::kArray) {
      if (l.a->size() + r.a->size() > 1000000) error(line, "list too long");
      Array out = *l.a;
      out.insert(out.end(), r.a->begin(), r.a->end());
      return Value::array(std::move(out));
    }
  }
  if (op == "*") {
    const Value* seq = l.kind == Kind::kString || l.kind == Kind::kArray   ? &l
                       : r.kind == Kind::kString || r.kind == Kind::kArray ? &r
                                                                           : nullptr;
    const Value* cnt = seq == &l ? &r : &l;
    if (seq && (cnt->kind == Kind::kInt || cnt->kind == Kind::kBool)) {
      const int64_t n = std::max<int64_t>(0, cnt->as_int());
      const size_t unit = seq->kind == Kind::kString ? seq->s.size() : seq->a->size();
      if (unit > 0 && static_cast<uint64_t>(n) > limits_.max_output / unit)
        error(line, "repetition too long");
      if (seq->kind == Kind::kString) {
        std::string out;
        for (int64_t k = 0; k < n; ++k) out += seq->s;
        return Value::string(std::move(out));
      }
      Array out;
      for (int64_t k = 0; k < n; ++k) out.insert(out.end(), seq->a->begin(), seq->a->end());
      return Value::array(std::move(out));
    }
  }
  return std::nullopt;
}

}  // namespace steermoe::jinja::detail
