// What templates call by name: the globals (raise_exception, namespace, dict, range,
// strftime_now), the filters, the tests, and the string and dict methods, each as Python and
// Jinja define them for the values a chat template sees.
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <limits>
#include <optional>

#include "template/renderer.hpp"

namespace steermoe::jinja::detail {
namespace {

std::string strip_chars(const std::string& s, const std::string* chars, bool left, bool right) {
  auto in = [&](char c) { return chars ? chars->find(c) != std::string::npos : is_space(c); };
  size_t b = 0, e = s.size();
  if (left)
    while (b < e && in(s[b])) ++b;
  if (right)
    while (e > b && in(s[e - 1])) --e;
  return s.substr(b, e - b);
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

std::string title(const std::string& s) {
  std::string out = s;
  bool start = true;
  for (char& c : out) {
    const auto u = static_cast<unsigned char>(c);
    if (std::isalpha(u)) {
      c = static_cast<char>(start ? std::toupper(u) : std::tolower(u));
      start = false;
    } else {
      start = true;
    }
  }
  return out;
}

std::string capitalize(const std::string& s) {
  std::string out = lower(s);
  if (!out.empty()) out[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(out[0])));
  return out;
}

// Positional argument k, which must be a string (`what` names the method in the error).
const std::string& string_arg(const Args& a, size_t k, const char* what, int line) {
  if (k >= a.pos.size() || a.pos[k].kind != Kind::kString) {
    error(line, std::string(what) + " takes a string");
  }
  return a.pos[k].s;
}

}  // namespace

void Renderer::install_globals(Scope& g) {
  g["raise_exception"] = Value::function([](Args& a) -> Value {
    error(0, "raise_exception: " + (a.pos.empty() ? std::string() : str(a.pos[0])));
  });
  g["namespace"] = Value::function([](Args& a) {
    Value ns = Value::object(true);
    for (const Value& p : a.pos) {
      if (p.kind != Kind::kObject) error(0, "namespace() takes a mapping or keywords");
      for (const auto& [k, v] : p.o->items) ns.o->set(k, v);
    }
    for (auto& [k, v] : a.kw) ns.o->set(k, v);
    return ns;
  });
  g["dict"] = Value::function([](Args& a) {
    Value d = Value::object();
    for (auto& [k, v] : a.kw) d.o->set(k, v);
    return d;
  });
  g["range"] = Value::function([this](Args& a) {
    int64_t start = 0, stop = 0, stepv = 1;
    auto num = [](const Value& v) {
      if (v.kind != Kind::kInt && v.kind != Kind::kBool) error(0, "range() takes integers");
      return v.as_int();
    };
    if (a.pos.size() == 1) {
      stop = num(a.pos[0]);
    } else if (a.pos.size() >= 2) {
      start = num(a.pos[0]);
      stop = num(a.pos[1]);
      if (a.pos.size() > 2) stepv = num(a.pos[2]);
    } else {
      error(0, "range() takes 1 to 3 arguments");
    }
    if (stepv == 0) error(0, "range() step must not be zero");
    Array out;
    for (int64_t k = start; stepv > 0 ? k < stop : k > stop; k += stepv) {
      if (out.size() >= 100000) error(0, "range() is too long");
      step(0);
      out.push_back(Value::integer(k));
    }
    return Value::array(std::move(out));
  });
  g["strftime_now"] = Value::function([](Args& a) {
    if (a.pos.empty() || a.pos[0].kind != Kind::kString) error(0, "strftime_now(format)");
    const std::time_t t = std::time(nullptr);
    std::tm tm{};
    localtime_r(&t, &tm);
    char buf[256];
    const size_t n = std::strftime(buf, sizeof buf, a.pos[0].s.c_str(), &tm);
    return Value::string(std::string(buf, n));
  });
}

Array Renderer::split(const std::string& s, const Value* sep, int64_t maxsplit, int line) {
  Array out;
  if (!sep || sep->kind == Kind::kNone) {
    size_t k = 0;
    int64_t splits = 0;
    while (k < s.size()) {
      while (k < s.size() && is_space(s[k])) ++k;
      if (k >= s.size()) break;
      if (maxsplit >= 0 && splits >= maxsplit) {
        out.push_back(Value::string(strip_chars(s.substr(k), nullptr, false, true)));
        break;
      }
      size_t e = k;
      while (e < s.size() && !is_space(s[e])) ++e;
      out.push_back(Value::string(s.substr(k, e - k)));
      ++splits;
      k = e;
    }
    return out;
  }
  if (sep->kind != Kind::kString) error(line, "split() separator must be a string");
  if (sep->s.empty()) error(line, "empty separator");
  size_t k = 0;
  int64_t splits = 0;
  for (;;) {
    step(line);
    const size_t f = s.find(sep->s, k);
    if (f == std::string::npos || (maxsplit >= 0 && splits >= maxsplit)) {
      out.push_back(Value::string(s.substr(k)));
      break;
    }
    out.push_back(Value::string(s.substr(k, f - k)));
    k = f + sep->s.size();
    ++splits;
  }
  return out;
}

std::string Renderer::replace(const std::string& s, const std::string& from, const std::string& to,
                              int64_t count, int line) {
  std::string out;
  if (from.empty()) {
    // Python inserts `to` between every character (and at both ends).
    const auto starts = char_starts(s);
    int64_t n = 0;
    for (size_t k = 0; k <= starts.size(); ++k) {
      if (count < 0 || n < count) {
        out += to;
        ++n;
      }
      if (k < starts.size()) {
        const size_t end = k + 1 < starts.size() ? starts[k + 1] : s.size();
        out += s.substr(starts[k], end - starts[k]);
      }
      if (out.size() > limits_.max_output) error(line, "replace() result too long");
    }
    return out;
  }
  size_t k = 0;
  int64_t n = 0;
  for (;;) {
    const size_t f = s.find(from, k);
    if (f == std::string::npos || (count >= 0 && n >= count)) break;
    out += s.substr(k, f - k) + to;
    if (out.size() > limits_.max_output) error(line, "replace() result too long");
    k = f + from.size();
    ++n;
  }
  return out + s.substr(k);
}

// `self`'s method `name` as a function value bound to it; undefined when it has none.
Value Renderer::method(const Value& self, const std::string& name, int line) {
  if (self.kind == Kind::kString) return string_method(self, name, line);
  if (self.kind == Kind::kObject && !self.o->is_namespace) return dict_method(self, name, line);
  return Value::undefined(name);
}

// The methods of str that templates use, but for the searches (string_search_method).
Value Renderer::string_method(const Value& self, const std::string& name, int line) {
  auto fn = [&](auto f) { return bound_function(self, line, f); };
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    const bool l = name != "rstrip", r = name != "lstrip";
    return fn([l, r](Renderer&, const Value& s, Args& a, int ln) {
      const Value* c = a.get(0, "chars");
      if (c && c->kind != Kind::kString && c->kind != Kind::kNone)
        error(ln, "strip() takes a string");
      return Value::string(strip_chars(s.s, c && c->kind == Kind::kString ? &c->s : nullptr, l, r));
    });
  }
  if (name == "split") {
    return fn([](Renderer& R, const Value& s, Args& a, int ln) {
      const Value* m = a.get(1, "maxsplit");
      return Value::array(R.split(s.s, a.get(0, "sep"), m ? m->as_int() : -1, ln));
    });
  }
  if (name == "upper")
    return fn([](Renderer&, const Value& s, Args&, int) { return Value::string(upper(s.s)); });
  if (name == "lower")
    return fn([](Renderer&, const Value& s, Args&, int) { return Value::string(lower(s.s)); });
  if (name == "title")
    return fn([](Renderer&, const Value& s, Args&, int) { return Value::string(title(s.s)); });
  if (name == "capitalize") {
    return fn([](Renderer&, const Value& s, Args&, int) { return Value::string(capitalize(s.s)); });
  }
  if (name == "join") {
    return fn([this](Renderer&, const Value& s, Args& a, int ln) {
      if (a.pos.empty()) error(ln, "join() takes an iterable");
      std::string out;
      bool first = true;
      for (const Value& x : iterate(a.pos[0], ln)) {
        out += (first ? "" : s.s) + str(x);
        first = false;
      }
      return Value::string(std::move(out));
    });
  }
  if (name == "splitlines") {
    return fn([](Renderer& R, const Value& s, Args&, int ln) {
      Value sep = Value::string("\n");
      Array parts = R.split(s.s, &sep, -1, ln);
      if (!parts.empty() && parts.back().s.empty()) parts.pop_back();
      for (Value& p : parts)
        if (!p.s.empty() && p.s.back() == '\r') p.s.pop_back();
      return Value::array(std::move(parts));
    });
  }
  return string_search_method(self, name, line);
}

// The str methods that search: startswith, endswith, find, count, index, replace.
Value Renderer::string_search_method(const Value& self, const std::string& name, int line) {
  auto fn = [&](auto f) { return bound_function(self, line, f); };
  if (name == "startswith" || name == "endswith") {
    const bool starts = name == "startswith";
    return fn([starts](Renderer&, const Value& s, Args& a, int ln) {
      if (a.pos.empty()) error(ln, "startswith/endswith take a string");
      auto check = [&](const std::string& p) {
        return starts
                   ? s.s.rfind(p, 0) == 0
                   : s.s.size() >= p.size() && s.s.compare(s.s.size() - p.size(), p.size(), p) == 0;
      };
      if (a.pos[0].kind == Kind::kArray) {
        for (const Value& p : *a.pos[0].a) {
          if (p.kind != Kind::kString) error(ln, "startswith/endswith take strings");
          if (check(p.s)) return Value::boolean(true);
        }
        return Value::boolean(false);
      }
      if (a.pos[0].kind != Kind::kString) error(ln, "startswith/endswith take a string");
      return Value::boolean(check(a.pos[0].s));
    });
  }
  if (name == "find" || name == "count" || name == "index") {
    const std::string which = name;
    return fn([which](Renderer&, const Value& s, Args& a, int ln) {
      const std::string& sub = string_arg(a, 0, "find()/count()", ln);
      if (which == "count") {
        if (sub.empty()) return Value::integer(static_cast<int64_t>(char_count(s.s)) + 1);
        int64_t n = 0;
        for (size_t k = s.s.find(sub); k != std::string::npos; k = s.s.find(sub, k + sub.size()))
          ++n;
        return Value::integer(n);
      }
      const size_t f = s.s.find(sub);
      if (f == std::string::npos) {
        if (which == "index") error(ln, "substring not found");
        return Value::integer(-1);
      }
      return Value::integer(static_cast<int64_t>(char_count(s.s.substr(0, f))));
    });
  }
  if (name == "replace") {
    return fn([](Renderer& R, const Value& s, Args& a, int ln) {
      const Value* c = a.get(2, "count");
      return Value::string(R.replace(s.s, string_arg(a, 0, "replace()", ln),
                                     string_arg(a, 1, "replace()", ln), c ? c->as_int() : -1, ln));
    });
  }
  return Value::undefined(name);
}

// The methods of dict that templates use.
Value Renderer::dict_method(const Value& self, const std::string& name, int line) {
  auto fn = [&](auto f) { return bound_function(self, line, f); };
  if (name == "items") {
    return fn([](Renderer&, const Value& d, Args&, int) {
      Array out;
      for (const auto& [k, v] : d.o->items) out.push_back(Value::array({Value::string(k), v}));
      return Value::array(std::move(out));
    });
  }
  if (name == "keys") {
    return fn([](Renderer&, const Value& d, Args&, int) {
      Array out;
      for (const auto& kv : d.o->items) out.push_back(Value::string(kv.first));
      return Value::array(std::move(out));
    });
  }
  if (name == "values") {
    return fn([](Renderer&, const Value& d, Args&, int) {
      Array out;
      for (const auto& kv : d.o->items) out.push_back(kv.second);
      return Value::array(std::move(out));
    });
  }
  if (name == "get") {
    return fn([](Renderer&, const Value& d, Args& a, int ln) {
      if (a.pos.empty() || a.pos[0].kind != Kind::kString) error(ln, "get() takes a key");
      if (const Value* x = d.o->find(a.pos[0].s)) return *x;
      return a.pos.size() > 1 ? a.pos[1] : Value::none();
    });
  }
  return Value::undefined(name);
}

bool Renderer::test(const std::string& name, const Value& v, Args& a, int line) {
  auto arg = [&]() -> const Value& {
    if (a.pos.empty()) error(line, "test '" + name + "' needs an argument");
    return a.pos[0];
  };
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.kind == Kind::kNone;
  if (name == "boolean") return v.kind == Kind::kBool;
  if (name == "true") return v.kind == Kind::kBool && v.b;
  if (name == "false") return v.kind == Kind::kBool && !v.b;
  if (name == "integer") return v.kind == Kind::kInt;
  if (name == "float") return v.kind == Kind::kFloat;
  if (name == "number") return v.is_number();
  if (name == "string") return v.kind == Kind::kString;
  if (name == "mapping") return v.kind == Kind::kObject && !v.o->is_namespace;
  if (name == "iterable")
    return v.kind == Kind::kArray || v.kind == Kind::kString ||
           (v.kind == Kind::kObject && !v.o->is_namespace);
  if (name == "sequence")
    return v.kind == Kind::kArray || v.kind == Kind::kString ||
           (v.kind == Kind::kObject && !v.o->is_namespace);
  if (name == "callable") return v.kind == Kind::kFunction;
  if (name == "odd" || name == "even") {
    if (v.kind != Kind::kInt && v.kind != Kind::kBool) error(line, "odd/even need an integer");
    const bool odd = (v.as_int() % 2) != 0;
    return name == "odd" ? odd : !odd;
  }
  if (name == "divisibleby") {
    const Value& d = arg();
    if (!v.is_number() || !d.is_number() || d.as_double() == 0.0)
      error(line, "divisibleby needs numbers");
    return std::fmod(v.as_double(), d.as_double()) == 0.0;
  }
  if (name == "eq" || name == "equalto" || name == "==") return equal(v, arg());
  if (name == "ne" || name == "!=") return !equal(v, arg());
  if (name == "lt" || name == "lessthan" || name == "<") return compare(v, arg(), line) < 0;
  if (name == "le" || name == "<=") return compare(v, arg(), line) <= 0;
  if (name == "gt" || name == "greaterthan" || name == ">") return compare(v, arg(), line) > 0;
  if (name == "ge" || name == ">=") return compare(v, arg(), line) >= 0;
  if (name == "in") {
    const Value& c = arg();
    if (c.kind == Kind::kString)
      return v.kind == Kind::kString && c.s.find(v.s) != std::string::npos;
    if (c.kind == Kind::kArray) {
      for (const Value& x : *c.a)
        if (equal(v, x)) return true;
      return false;
    }
    if (c.kind == Kind::kObject) return v.kind == Kind::kString && c.o->find(v.s);
    error(line, "'in' test needs a container");
  }
  if (name == "sameas") {
    const Value& o = arg();
    if (v.kind != o.kind) return false;
    if (v.kind == Kind::kArray) return v.a == o.a;
    if (v.kind == Kind::kObject) return v.o == o.o;
    return equal(v, o);
  }
  if (name == "lower") return v.kind == Kind::kString && lower(v.s) == v.s;
  if (name == "upper") return v.kind == Kind::kString && upper(v.s) == v.s;
  error(line, "unknown test '" + name + "'");
}

std::vector<Value> Renderer::select(const Array& items, Args& a, size_t first, bool want,
                                    bool by_attr, int line) {
  Array out;
  std::string attr;
  if (by_attr) {
    if (a.pos.empty() || a.pos[0].kind != Kind::kString)
      error(line, "selectattr needs an attribute name");
    attr = a.pos[0].s;
    first = 1;
  }
  for (const Value& item : items) {
    step(line);
    const Value x =
        by_attr ? (item.kind == Kind::kObject ? get_attr(item, attr, line) : Value::undefined(attr))
                : item;
    bool ok;
    if (a.pos.size() <= first) {
      ok = truthy(x);
    } else {
      if (a.pos[first].kind != Kind::kString) error(line, "select needs a test name");
      Args targs;
      targs.pos.assign(a.pos.begin() + static_cast<ptrdiff_t>(first) + 1, a.pos.end());
      ok = test(a.pos[first].s, x, targs, line);
    }
    if (ok == want) out.push_back(item);
  }
  return out;
}

// Filters on text: whitespace, case, escaping, replacement, indentation, JSON.
std::optional<Value> Renderer::text_filter(const std::string& name, const Value& v, Args& a,
                                           int line) {
  if (name == "trim") {
    const Value* c = a.get(0, "chars");
    return Value::string(
        strip_chars(str(v), c && c->kind == Kind::kString ? &c->s : nullptr, true, true));
  }
  if (name == "string") return Value::string(str(v));
  if (name == "safe") return v;
  if (name == "e" || name == "escape") {
    std::string out;
    for (char c : str(v)) {
      switch (c) {
        case '&':
          out += "&amp;";
          break;
        case '<':
          out += "&lt;";
          break;
        case '>':
          out += "&gt;";
          break;
        case '"':
          out += "&#34;";
          break;
        case '\'':
          out += "&#39;";
          break;
        default:
          out += c;
      }
    }
    return Value::string(std::move(out));
  }
  if (name == "lower") return Value::string(lower(str(v)));
  if (name == "upper") return Value::string(upper(str(v)));
  if (name == "title") return Value::string(title(str(v)));
  if (name == "capitalize") return Value::string(capitalize(str(v)));
  if (name == "replace") {
    if (a.pos.size() < 2 || a.pos[0].kind != Kind::kString || a.pos[1].kind != Kind::kString) {
      error(line, "replace needs two strings");
    }
    const Value* c = a.get(2, "count");
    return Value::string(replace(str(v), a.pos[0].s, a.pos[1].s, c ? c->as_int() : -1, line));
  }
  if (name == "indent") {
    const Value* w = a.get(0, "width");
    const Value* first = a.get(1, "first");
    const Value* blank = a.get(2, "blank");
    std::string pad =
        w && w->kind == Kind::kString
            ? w->s
            : std::string(static_cast<size_t>(std::clamp<int64_t>(w ? w->as_int() : 4, 0, 256)),
                          ' ');
    Value nl = Value::string("\n");
    Array lines = split(str(v), &nl, -1, line);
    std::string out;
    for (size_t k = 0; k < lines.size(); ++k) {
      if (k) out += "\n";
      const bool do_pad = (k > 0 || (first && truthy(*first))) &&
                          (!lines[k].s.empty() || (blank && truthy(*blank)));
      out += (do_pad ? pad : "") + lines[k].s;
      if (out.size() > limits_.max_output) error(line, "indent result too long");
    }
    return Value::string(std::move(out));
  }
  if (name == "wordcount") {
    return Value::integer(static_cast<int64_t>(split(str(v), nullptr, -1, line).size()));
  }
  if (name == "tojson") {
    const Value* ind = a.get(0, "indent");
    int indent = -1;
    if (ind && ind->kind != Kind::kNone) {
      if (ind->kind != Kind::kInt || ind->i < 0 || ind->i > 64)
        error(line, "tojson indent must be 0..64");
      indent = static_cast<int>(ind->i);
    }
    std::string out;
    to_json(v, indent, 0, out, line);
    if (out.size() > limits_.max_output) error(line, "tojson result too long");
    return Value::string(std::move(out));
  }
  return std::nullopt;
}

// Conversions of one value (int, float, abs, round) and the default for undefined values.
std::optional<Value> Renderer::scalar_filter(const std::string& name, const Value& v, Args& a,
                                             int line) {
  if (name == "int") {
    if (v.kind == Kind::kInt || v.kind == Kind::kBool) return Value::integer(v.as_int());
    if (v.kind == Kind::kFloat) {
      if (!std::isfinite(v.f) || std::fabs(v.f) >= 9.2e18) return Value::integer(0);
      return Value::integer(static_cast<int64_t>(v.f));
    }
    if (v.kind == Kind::kString) {
      int64_t x = 0;
      const std::string t = strip_chars(v.s, nullptr, true, true);
      auto r = std::from_chars(t.data(), t.data() + t.size(), x);
      if (r.ec != std::errc() || r.ptr != t.data() + t.size()) return Value::integer(0);
      return Value::integer(x);
    }
    return Value::integer(0);
  }
  if (name == "float") {
    if (v.is_number()) return Value::number(v.as_double());
    if (v.kind == Kind::kString) {
      char* end = nullptr;
      const double x = std::strtod(v.s.c_str(), &end);
      return Value::number(end && *end == '\0' && !v.s.empty() ? x : 0.0);
    }
    return Value::number(0.0);
  }
  if (name == "abs") {
    if (v.kind == Kind::kFloat) return Value::number(std::fabs(v.f));
    if (v.kind == Kind::kInt || v.kind == Kind::kBool) {
      if (v.as_int() == std::numeric_limits<int64_t>::min()) error(line, "integer overflow");
      return Value::integer(std::llabs(v.as_int()));
    }
    error(line, "abs needs a number");
  }
  if (name == "round") {
    if (!v.is_number()) error(line, "round needs a number");
    const Value* p = a.get(0, "precision");
    const int64_t prec = p ? std::clamp<int64_t>(p->as_int(), 0, 15) : 0;
    const double scale = std::pow(10.0, static_cast<double>(prec));
    return Value::number(std::round(v.as_double() * scale) / scale);
  }
  if (name == "default" || name == "d") {
    const Value* def = a.get(0, "default_value");
    const Value* boolean = a.get(1, "boolean");
    const bool use = v.is_undefined() || (boolean && truthy(*boolean) && !truthy(v));
    return use ? (def ? *def : Value::string("")) : v;
  }
  return std::nullopt;
}

// Filters that read a sequence or mapping whole: sizes, items, ends, order, join, sums, extremes.
std::optional<Value> Renderer::sequence_filter(const std::string& name, const Value& v, Args& a,
                                               int line) {
  if (name == "length" || name == "count") {
    switch (v.kind) {
      case Kind::kString:
        return Value::integer(static_cast<int64_t>(char_count(v.s)));
      case Kind::kArray:
        return Value::integer(static_cast<int64_t>(v.a->size()));
      case Kind::kObject:
        return Value::integer(static_cast<int64_t>(v.o->items.size()));
      case Kind::kUndefined:
        return Value::integer(0);
      default:
        error(line, "object has no length");
    }
  }
  if (name == "items") {
    if (v.kind == Kind::kUndefined) return Value::array();
    if (v.kind != Kind::kObject || v.o->is_namespace) error(line, "items needs a mapping");
    return (*method(v, "items", line).fn)(a);
  }
  if (name == "dictsort") {
    if (v.kind != Kind::kObject || v.o->is_namespace) error(line, "dictsort needs a mapping");
    Array out;
    for (const auto& [k, x] : v.o->items) out.push_back(Value::array({Value::string(k), x}));
    std::stable_sort(out.begin(), out.end(), [](const Value& p, const Value& q) {
      return lower((*p.a)[0].s) < lower((*q.a)[0].s);
    });
    return Value::array(std::move(out));
  }
  if (name == "first" || name == "last") {
    Array items = iterate(v, line);
    if (items.empty()) return Value::undefined(name);
    return name == "first" ? items.front() : items.back();
  }
  if (name == "list") return Value::array(iterate(v, line));
  if (name == "reverse") {
    if (v.kind == Kind::kString) {
      Array chars = iterate(v, line);
      std::string out;
      for (auto it = chars.rbegin(); it != chars.rend(); ++it) out += it->s;
      return Value::string(std::move(out));
    }
    Array items = iterate(v, line);
    std::reverse(items.begin(), items.end());
    return Value::array(std::move(items));
  }
  if (name == "join") {
    const Value* sep = a.get(0, "d");
    const Value* attr = a.kwarg("attribute");
    std::string out;
    bool first = true;
    for (const Value& x : iterate(v, line)) {
      const Value y = attr && attr->kind == Kind::kString ? get_attr(x, attr->s, line) : x;
      out += (first ? "" : (sep ? str(*sep) : "")) + str(y);
      first = false;
      if (out.size() > limits_.max_output) error(line, "join result too long");
    }
    return Value::string(std::move(out));
  }
  if (name == "sum") {
    Value acc = Value::integer(0);
    for (const Value& x : iterate(v, line)) {
      if (!x.is_number()) error(line, "sum needs numbers");
      if (acc.kind == Kind::kInt && x.kind != Kind::kFloat) {
        int64_t out = 0;
        if (__builtin_add_overflow(acc.i, x.as_int(), &out)) error(line, "integer overflow");
        acc.i = out;
      } else {
        acc = Value::number(acc.as_double() + x.as_double());
      }
    }
    return acc;
  }
  if (name == "min" || name == "max") {
    Array items = iterate(v, line);
    if (items.empty()) return Value::undefined(name);
    Value best = items[0];
    for (const Value& x : items) {
      const int c = compare(x, best, line);
      if (name == "min" ? c < 0 : c > 0) best = x;
    }
    return best;
  }
  return std::nullopt;
}

// Filters that pick or transform items one by one: unique, sort, map, select and reject.
std::optional<Value> Renderer::selection_filter(const std::string& name, const Value& v, Args& a,
                                                int line) {
  if (name == "unique") {
    Array out;
    for (const Value& x : iterate(v, line)) {
      step(line);
      bool seen = false;
      for (const Value& y : out)
        if (equal(x, y)) {
          seen = true;
          break;
        }
      if (!seen) out.push_back(x);
    }
    return Value::array(std::move(out));
  }
  if (name == "sort") {
    Array items = iterate(v, line);
    const Value* rev = a.get(0, "reverse");
    const Value* attr = a.kwarg("attribute");
    auto key = [&](const Value& x) {
      return attr && attr->kind == Kind::kString ? get_attr(x, attr->s, line) : x;
    };
    if (items.size() > 100000) error(line, "sort: too many items");
    std::stable_sort(items.begin(), items.end(), [&](const Value& p, const Value& q) {
      return compare(key(p), key(q), line) < 0;
    });
    if (rev && truthy(*rev)) std::reverse(items.begin(), items.end());
    return Value::array(std::move(items));
  }
  if (name == "map") {
    Array out;
    const Value* attr = a.kwarg("attribute");
    for (const Value& x : iterate(v, line)) {
      step(line);
      if (attr) {
        if (attr->kind != Kind::kString) error(line, "map attribute must be a string");
        Value y = x.kind == Kind::kObject ? get_attr(x, attr->s, line) : Value::undefined(attr->s);
        if (y.is_undefined()) {
          if (const Value* d = a.kwarg("default")) y = *d;
        }
        out.push_back(y);
      } else {
        if (a.pos.empty() || a.pos[0].kind != Kind::kString) error(line, "map needs a filter name");
        Args rest;
        rest.pos.assign(a.pos.begin() + 1, a.pos.end());
        out.push_back(filter(a.pos[0].s, x, rest, line));
      }
    }
    return Value::array(std::move(out));
  }
  if (name == "select" || name == "reject") {
    return Value::array(select(iterate(v, line), a, 0, name == "select", false, line));
  }
  if (name == "selectattr" || name == "rejectattr") {
    return Value::array(select(iterate(v, line), a, 1, name == "selectattr", true, line));
  }
  return std::nullopt;
}

// The filter `name` applied to v: each group answers for its own names, nullopt for the others.
Value Renderer::filter(const std::string& name, const Value& v, Args& a, int line) {
  if (auto r = text_filter(name, v, a, line)) return *r;
  if (auto r = scalar_filter(name, v, a, line)) return *r;
  if (auto r = sequence_filter(name, v, a, line)) return *r;
  if (auto r = selection_filter(name, v, a, line)) return *r;
  error(line, "unknown filter '" + name + "'");
}

}  // namespace steermoe::jinja::detail
