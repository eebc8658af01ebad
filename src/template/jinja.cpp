// The Jinja subset interpreter: a lexer that applies whitespace control while it splits the
// source, a recursive-descent parser into a small tree, and a tree-walking evaluator over a
// dynamically typed Value that follows Python's semantics where templates can observe them
// (truthiness, equality, str() and repr() of values, slicing, integer/float arithmetic).
#include "template/jinja.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <ctime>
#include <functional>
#include <limits>
#include <map>
#include <unordered_map>
#include <variant>
#include <vector>

namespace steermoe::jinja {

namespace {

// ---------------------------------------------------------------------------------------------
// Values

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

  static Value undefined(std::string name = "") {
    Value v;
    v.undefined_name = std::move(name);
    return v;
  }
  static Value none() {
    Value v;
    v.kind = Kind::kNone;
    return v;
  }
  static Value boolean(bool x) {
    Value v;
    v.kind = Kind::kBool;
    v.b = x;
    return v;
  }
  static Value integer(int64_t x) {
    Value v;
    v.kind = Kind::kInt;
    v.i = x;
    return v;
  }
  static Value number(double x) {
    Value v;
    v.kind = Kind::kFloat;
    v.f = x;
    return v;
  }
  static Value string(std::string x) {
    Value v;
    v.kind = Kind::kString;
    v.s = std::move(x);
    return v;
  }
  static Value array(Array x = {}) {
    Value v;
    v.kind = Kind::kArray;
    v.a = std::make_shared<Array>(std::move(x));
    return v;
  }
  static Value object(bool is_namespace = false);
  static Value function(Function f) {
    Value v;
    v.kind = Kind::kFunction;
    v.fn = std::make_shared<Function>(std::move(f));
    return v;
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

Value Value::object(bool is_namespace) {
  Value v;
  v.kind = Kind::kObject;
  v.o = std::make_shared<Object>();
  v.o->is_namespace = is_namespace;
  return v;
}

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

[[noreturn]] void error(int line, const std::string& what) {
  throw TemplateError(line > 0 ? fmt::format("line {}: {}", line, what) : what);
}

Value from_json(const nlohmann::ordered_json& j, int depth = 0) {
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
    if (digits.size() > 1) out += "." + digits.substr(1);
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

std::string repr(const Value& v);

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

bool equal(const Value& x, const Value& y, int depth = 0) {
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

// Python's json.dumps(v, ensure_ascii=False, indent=indent) (transformers' tojson).
void to_json(const Value& v, int indent, int level, std::string& out, int line) {
  if (level > 256) error(line, "tojson: the value nests too deeply");
  const std::string nl =
      indent >= 0 ? "\n" + std::string(static_cast<size_t>(indent * (level + 1)), ' ') : "";
  const std::string nl_end =
      indent >= 0 ? "\n" + std::string(static_cast<size_t>(indent * level), ' ') : "";
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

// ---------------------------------------------------------------------------------------------
// Lexer

enum class Tok { kName, kInt, kFloat, kString, kOp, kEnd };

struct Token {
  Tok type = Tok::kEnd;
  std::string text;  // name, operator, decoded string literal, number text
  int line = 0;
};

enum class SegKind { kText, kExpr, kStmt };

struct Segment {
  SegKind kind;
  std::string text;           // kText
  std::vector<Token> tokens;  // kExpr / kStmt (ending with kEnd)
  int line = 0;
};

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

class Lexer {
 public:
  Lexer(std::string_view src) : src_(src) {}

  std::vector<Segment> run() {
    std::vector<Segment> segs;
    size_t pos = 0;
    bool strip_next = false;    // '-' on the previous closing tag
    bool trim_newline = false;  // trim_blocks after a block tag
    while (pos < src_.size()) {
      size_t open = find_open(pos);
      std::string text(src_.substr(pos, open - pos));
      if (trim_newline) {
        if (text.rfind("\r\n", 0) == 0) {
          text.erase(0, 2);
        } else if (!text.empty() && text[0] == '\n') {
          text.erase(0, 1);
        }
      }
      if (strip_next) {
        size_t k = 0;
        while (k < text.size() && is_space(text[k])) ++k;
        text.erase(0, k);
      }
      strip_next = trim_newline = false;
      if (open >= src_.size()) {
        add_text(segs, std::move(text));
        break;
      }
      const char kind = src_[open + 1];  // '{', '%' or '#'
      size_t body = open + 2;
      const bool minus = body < src_.size() && src_[body] == '-';
      const bool plus = body < src_.size() && src_[body] == '+';
      if (minus || plus) ++body;
      if (minus) {
        while (!text.empty() && is_space(text.back())) text.pop_back();
      } else if (!plus && kind != '{') {
        // lstrip_blocks: drop spaces/tabs between the start of the line and the tag.
        size_t k = text.size();
        while (k > 0 && (text[k - 1] == ' ' || text[k - 1] == '\t')) --k;
        size_t sp = open;
        while (sp > pos && (src_[sp - 1] == ' ' || src_[sp - 1] == '\t')) --sp;
        const bool line_start = sp == 0 || src_[sp - 1] == '\n';
        if (line_start) text.resize(k);
      }
      add_text(segs, std::move(text));
      line_ = line_at(open);
      if (kind == '#') {
        const size_t close = src_.find("#}", body);
        if (close == std::string_view::npos) error(line_, "unterminated comment");
        strip_next = close > body && src_[close - 1] == '-';
        trim_newline = !strip_next;
        pos = close + 2;
        continue;
      }
      Segment seg;
      seg.kind = kind == '{' ? SegKind::kExpr : SegKind::kStmt;
      seg.line = line_;
      pos = tokenize(body, kind == '{' ? '}' : '%', seg.tokens, strip_next);
      if (seg.kind == SegKind::kStmt) trim_newline = !strip_next;
      segs.push_back(std::move(seg));
    }
    return segs;
  }

 private:
  static void add_text(std::vector<Segment>& segs, std::string text) {
    if (text.empty()) return;
    Segment s;
    s.kind = SegKind::kText;
    s.text = std::move(text);
    segs.push_back(std::move(s));
  }

  size_t find_open(size_t from) const {
    for (size_t k = from; k + 1 < src_.size(); ++k) {
      if (src_[k] == '{' && (src_[k + 1] == '{' || src_[k + 1] == '%' || src_[k + 1] == '#'))
        return k;
    }
    return src_.size();
  }

  int line_at(size_t pos) {
    for (; counted_ < pos && counted_ < src_.size(); ++counted_) {
      if (src_[counted_] == '\n') ++lines_;
    }
    return lines_;
  }

  // Tokens from `pos` up to the closing "}}" / "%}" (with optional '-'); returns the position
  // after it.
  size_t tokenize(size_t pos, char close, std::vector<Token>& out, bool& strip_after) {
    const int line = line_;
    int braces = 0;  // open '{' of dict literals: their '}' never closes the tag
    for (;;) {
      while (pos < src_.size() && is_space(src_[pos])) ++pos;
      if (pos >= src_.size()) error(line, "unterminated tag");
      const char c = src_[pos];
      // Closing: [-]<close>}
      if (c == '-' && pos + 2 < src_.size() && src_[pos + 1] == close && src_[pos + 2] == '}' &&
          (close != '}' || braces == 0)) {
        strip_after = true;
        out.push_back({Tok::kEnd, "", line});
        return pos + 3;
      }
      if (c == '+' && pos + 2 < src_.size() && src_[pos + 1] == close && src_[pos + 2] == '}') {
        strip_after = false;
        out.push_back({Tok::kEnd, "", line});
        return pos + 3;
      }
      if (c == close && pos + 1 < src_.size() && src_[pos + 1] == '}' &&
          (close != '}' || braces == 0)) {
        strip_after = false;
        out.push_back({Tok::kEnd, "", line});
        return pos + 2;
      }
      if (out.size() > 100000) error(line, "tag too long");
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t e = pos;
        while (e < src_.size() &&
               (std::isalnum(static_cast<unsigned char>(src_[e])) || src_[e] == '_'))
          ++e;
        out.push_back({Tok::kName, std::string(src_.substr(pos, e - pos)), line});
        pos = e;
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        size_t e = pos;
        bool is_float = false;
        while (e < src_.size() &&
               (std::isdigit(static_cast<unsigned char>(src_[e])) || src_[e] == '_'))
          ++e;
        if (e + 1 < src_.size() && src_[e] == '.' &&
            std::isdigit(static_cast<unsigned char>(src_[e + 1]))) {
          is_float = true;
          ++e;
          while (e < src_.size() && std::isdigit(static_cast<unsigned char>(src_[e]))) ++e;
        }
        if (e < src_.size() && (src_[e] == 'e' || src_[e] == 'E')) {
          size_t k = e + 1;
          if (k < src_.size() && (src_[k] == '+' || src_[k] == '-')) ++k;
          if (k < src_.size() && std::isdigit(static_cast<unsigned char>(src_[k]))) {
            is_float = true;
            e = k;
            while (e < src_.size() && std::isdigit(static_cast<unsigned char>(src_[e]))) ++e;
          }
        }
        std::string num;
        for (char d : src_.substr(pos, e - pos))
          if (d != '_') num += d;
        out.push_back({is_float ? Tok::kFloat : Tok::kInt, num, line});
        pos = e;
      } else if (c == '\'' || c == '"') {
        std::string s;
        size_t k = pos + 1;
        for (;;) {
          if (k >= src_.size()) error(line, "unterminated string literal");
          const char d = src_[k];
          if (d == c) break;
          if (d == '\\' && k + 1 < src_.size()) {
            const char e = src_[k + 1];
            k += 2;
            switch (e) {
              case 'n':
                s += '\n';
                break;
              case 't':
                s += '\t';
                break;
              case 'r':
                s += '\r';
                break;
              case '0':
                s += '\0';
                break;
              case '\\':
                s += '\\';
                break;
              case '\'':
                s += '\'';
                break;
              case '"':
                s += '"';
                break;
              case '\n':
                break;
              default:
                s += '\\';
                s += e;
            }
            continue;
          }
          s += d;
          ++k;
        }
        out.push_back({Tok::kString, std::move(s), line});
        pos = k + 1;
      } else {
        static const char* const ops[] = {"**", "//", "==", "!=", "<=", ">=", "+", "-", "*",
                                          "/",  "%",  "~",  "<",  ">",  "=",  "(", ")", "[",
                                          "]",  "{",  "}",  ",",  ".",  ":",  "|"};
        bool matched = false;
        for (const char* op : ops) {
          const size_t n = std::char_traits<char>::length(op);
          if (src_.substr(pos, n) == op) {
            out.push_back({Tok::kOp, op, line});
            if (op[0] == '{' && n == 1) ++braces;
            if (op[0] == '}' && n == 1 && braces > 0) --braces;
            pos += n;
            matched = true;
            break;
          }
        }
        if (!matched) error(line, fmt::format("unexpected character '{}'", c));
      }
    }
  }

  std::string_view src_;
  int line_ = 1;
  size_t counted_ = 0;
  int lines_ = 1;
};

// ---------------------------------------------------------------------------------------------
// Syntax tree

struct Expr;
using ExprP = std::unique_ptr<Expr>;

enum class EK {
  kLiteral,
  kName,
  kAttr,
  kItem,
  kSlice,
  kCall,
  kFilter,
  kTest,
  kNeg,
  kPos,
  kNot,
  kBinary,
  kAnd,
  kOr,
  kCond,
  kList,
  kDict
};

struct Expr {
  EK kind;
  int line = 0;
  Value value;              // kLiteral
  std::string name;         // kName, kAttr, kFilter, kTest, kBinary (operator)
  std::vector<ExprP> kids;  // operands / elements / dict k,v pairs / slice parts (may be null)
  std::vector<std::pair<std::string, ExprP>> kwargs;  // kCall / kFilter / kTest
  bool negated = false;                               // kTest ("is not"), kBinary "not in"
};

struct Node;
using Body = std::vector<std::unique_ptr<Node>>;

enum class NK { kText, kOutput, kIf, kFor, kSet, kSetBlock, kMacro, kBreak, kContinue };

struct Node {
  NK kind;
  int line = 0;
  std::string text;                              // kText
  ExprP expr;                                    // kOutput, kSet value, kFor iterable
  std::vector<std::pair<ExprP, Body>> branches;  // kIf
  Body body, else_body;                          // kFor, kIf else, kSetBlock, kMacro
  std::vector<std::string> targets;              // kFor / kSet names; kSet "ns.attr" -> {ns, attr}
  bool attr_target = false;                      // kSet: targets = {namespace, attribute}
  ExprP filter;                                  // kFor "if" condition
  std::vector<std::pair<std::string, ExprP>> params;  // kMacro (default may be null)
};

class Parser {
 public:
  Parser(std::vector<Segment> segs, const Limits& limits)
      : segs_(std::move(segs)), limits_(limits) {}

  Body parse() {
    Body body = parse_body({});
    if (seg_ < segs_.size())
      error(segs_[seg_].line, "unexpected '" + segs_[seg_].tokens[0].text + "'");
    return body;
  }

 private:
  struct DepthGuard {
    int& d;
    DepthGuard(int& depth, int max, int line) : d(depth) {
      if (++d > max) error(line, "the template nests too deeply");
    }
    ~DepthGuard() { --d; }
  };

  // Statements until one whose keyword is in `stops` (left unconsumed).
  Body parse_body(const std::vector<std::string>& stops) {
    DepthGuard g(depth_, limits_.max_depth, seg_ < segs_.size() ? segs_[seg_].line : 0);
    Body body;
    while (seg_ < segs_.size()) {
      Segment& s = segs_[seg_];
      if (s.kind == SegKind::kText) {
        auto n = std::make_unique<Node>();
        n->kind = NK::kText;
        n->text = std::move(s.text);
        body.push_back(std::move(n));
        ++seg_;
        continue;
      }
      toks_ = &s.tokens;
      at_ = 0;
      line_ = s.line;
      if (s.kind == SegKind::kExpr) {
        auto n = std::make_unique<Node>();
        n->kind = NK::kOutput;
        n->line = s.line;
        n->expr = expression();
        expect_end();
        body.push_back(std::move(n));
        ++seg_;
        continue;
      }
      if (peek().type != Tok::kName) error(line_, "expected a statement keyword");
      const std::string kw = peek().text;
      if (std::find(stops.begin(), stops.end(), kw) != stops.end()) return body;
      ++at_;
      ++seg_;
      body.push_back(statement(kw));
    }
    if (!stops.empty()) error(line_, "missing '" + stops.back() + "'");
    return body;
  }

  std::unique_ptr<Node> statement(const std::string& kw) {
    auto n = std::make_unique<Node>();
    n->line = line_;
    if (kw == "if") {
      n->kind = NK::kIf;
      ExprP cond = expression();
      expect_end();
      Body b = parse_body({"elif", "else", "endif"});
      n->branches.emplace_back(std::move(cond), std::move(b));
      for (;;) {
        const std::string k = keyword_here();
        ++seg_;
        if (k == "elif") {
          ExprP c = expression();
          expect_end();
          Body bb = parse_body({"elif", "else", "endif"});
          n->branches.emplace_back(std::move(c), std::move(bb));
        } else if (k == "else") {
          expect_end();
          n->else_body = parse_body({"endif"});
          keyword_here();
          ++seg_;
          expect_end();
          break;
        } else {
          expect_end();
          break;
        }
      }
    } else if (kw == "for") {
      n->kind = NK::kFor;
      n->targets.push_back(name());
      while (accept_op(",")) n->targets.push_back(name());
      if (!accept_name("in")) error(line_, "expected 'in' in for");
      n->expr = expression(/*no_cond=*/true);
      if (accept_name("if")) n->filter = expression(true);
      accept_name("recursive") ? error(line_, "recursive loops are not supported") : void();
      expect_end();
      n->body = parse_body({"else", "endfor"});
      if (keyword_here() == "else") {
        ++seg_;
        expect_end();
        n->else_body = parse_body({"endfor"});
        keyword_here();
      }
      ++seg_;
      expect_end();
    } else if (kw == "set") {
      std::string first = name();
      if (accept_op(".")) {
        n->attr_target = true;
        n->targets = {first, name()};
      } else {
        n->targets.push_back(first);
        while (accept_op(",")) n->targets.push_back(name());
      }
      if (accept_op("=")) {
        n->kind = NK::kSet;
        n->expr = expression();
        expect_end();
      } else {
        if (n->attr_target || n->targets.size() != 1) error(line_, "block set needs one name");
        n->kind = NK::kSetBlock;
        expect_end();
        n->body = parse_body({"endset"});
        keyword_here();
        ++seg_;
        expect_end();
      }
    } else if (kw == "macro") {
      n->kind = NK::kMacro;
      n->targets.push_back(name());
      if (!accept_op("(")) error(line_, "expected '(' after the macro name");
      if (!accept_op(")")) {
        do {
          std::string p = name();
          ExprP def;
          if (accept_op("=")) def = expression();
          n->params.emplace_back(std::move(p), std::move(def));
        } while (accept_op(","));
        if (!accept_op(")")) error(line_, "expected ')' after the macro parameters");
      }
      expect_end();
      n->body = parse_body({"endmacro"});
      keyword_here();
      ++seg_;
      expect_end();
    } else if (kw == "break" || kw == "continue") {
      n->kind = kw == "break" ? NK::kBreak : NK::kContinue;
      expect_end();
    } else if (kw == "generation") {
      // transformers' {% generation %} marks assistant text; it renders its body.
      expect_end();
      n->kind = NK::kIf;
      auto t = std::make_unique<Expr>();
      t->kind = EK::kLiteral;
      t->value = Value::boolean(true);
      n->branches.emplace_back(std::move(t), parse_body({"endgeneration"}));
      keyword_here();
      ++seg_;
      expect_end();
    } else {
      error(line_, "unsupported statement '" + kw + "'");
    }
    return n;
  }

  // The keyword of the statement segment at seg_ (sets up the token cursor).
  std::string keyword_here() {
    if (seg_ >= segs_.size()) error(line_, "unexpected end of template");
    Segment& s = segs_[seg_];
    toks_ = &s.tokens;
    at_ = 1;
    line_ = s.line;
    return s.tokens[0].text;
  }

  const Token& peek(size_t ahead = 0) const {
    const size_t k = std::min(at_ + ahead, toks_->size() - 1);
    return (*toks_)[k];
  }
  const Token& next() {
    const Token& t = peek();
    if (at_ < toks_->size() - 1) ++at_;
    return t;
  }
  bool is_op(const char* op, size_t ahead = 0) const {
    return peek(ahead).type == Tok::kOp && peek(ahead).text == op;
  }
  bool is_name(const char* n, size_t ahead = 0) const {
    return peek(ahead).type == Tok::kName && peek(ahead).text == n;
  }
  bool accept_op(const char* op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool accept_name(const char* n) {
    if (!is_name(n)) return false;
    next();
    return true;
  }
  std::string name() {
    if (peek().type != Tok::kName) error(line_, "expected a name, found '" + peek().text + "'");
    return next().text;
  }
  void expect_end() {
    if (peek().type != Tok::kEnd) error(line_, "unexpected '" + peek().text + "'");
  }
  void expect_op(const char* op) {
    if (!accept_op(op)) error(line_, fmt::format("expected '{}', found '{}'", op, peek().text));
  }

  ExprP make(EK k) {
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->line = line_;
    return e;
  }

  ExprP expression(bool no_cond = false) {
    DepthGuard g(depth_, limits_.max_depth, line_);
    ExprP e = or_expr();
    if (!no_cond && is_name("if")) {
      next();
      auto c = make(EK::kCond);
      ExprP cond = or_expr();
      ExprP other;
      if (accept_name("else")) other = expression();
      c->kids.push_back(std::move(e));
      c->kids.push_back(std::move(cond));
      c->kids.push_back(std::move(other));
      return c;
    }
    return e;
  }
  ExprP or_expr() {
    ExprP e = and_expr();
    while (accept_name("or")) {
      auto o = make(EK::kOr);
      o->kids.push_back(std::move(e));
      o->kids.push_back(and_expr());
      e = std::move(o);
    }
    return e;
  }
  ExprP and_expr() {
    ExprP e = not_expr();
    while (accept_name("and")) {
      auto o = make(EK::kAnd);
      o->kids.push_back(std::move(e));
      o->kids.push_back(not_expr());
      e = std::move(o);
    }
    return e;
  }
  ExprP not_expr() {
    if (is_name("not")) {
      next();
      DepthGuard g(depth_, limits_.max_depth, line_);
      auto n = make(EK::kNot);
      n->kids.push_back(not_expr());
      return n;
    }
    return compare();
  }
  ExprP binary(std::string op, ExprP l, ExprP r) {
    auto b = make(EK::kBinary);
    b->name = std::move(op);
    b->kids.push_back(std::move(l));
    b->kids.push_back(std::move(r));
    return b;
  }
  ExprP compare() {
    ExprP e = math1();
    for (;;) {
      if (peek().type == Tok::kOp &&
          (is_op("==") || is_op("!=") || is_op("<") || is_op(">") || is_op("<=") || is_op(">="))) {
        std::string op = next().text;
        e = binary(op, std::move(e), math1());
      } else if (is_name("in")) {
        next();
        e = binary("in", std::move(e), math1());
      } else if (is_name("not") && is_name("in", 1)) {
        next();
        next();
        e = binary("in", std::move(e), math1());
        e->negated = true;
      } else {
        return e;
      }
    }
  }
  ExprP math1() {
    ExprP e = concat();
    while (is_op("+") || is_op("-")) {
      std::string op = next().text;
      e = binary(op, std::move(e), concat());
    }
    return e;
  }
  ExprP concat() {
    ExprP e = math2();
    while (is_op("~")) {
      next();
      e = binary("~", std::move(e), math2());
    }
    return e;
  }
  ExprP math2() {
    ExprP e = power();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      std::string op = next().text;
      e = binary(op, std::move(e), power());
    }
    return e;
  }
  ExprP power() {
    ExprP e = unary();
    while (is_op("**")) {
      next();
      e = binary("**", std::move(e), unary());
    }
    return e;
  }
  ExprP unary() {
    DepthGuard g(depth_, limits_.max_depth, line_);
    if (is_op("-") || is_op("+")) {
      const bool neg = next().text == "-";
      auto u = make(neg ? EK::kNeg : EK::kPos);
      u->kids.push_back(unary_no_filter());
      return filters(std::move(u));
    }
    return filters(postfix(primary()));
  }
  ExprP unary_no_filter() {
    DepthGuard g(depth_, limits_.max_depth, line_);
    if (is_op("-") || is_op("+")) {
      const bool neg = next().text == "-";
      auto u = make(neg ? EK::kNeg : EK::kPos);
      u->kids.push_back(unary_no_filter());
      return u;
    }
    return postfix(primary());
  }
  void call_args(Expr& e) {
    // after '('
    if (accept_op(")")) return;
    do {
      if (is_op(")")) break;
      if (peek().type == Tok::kName && is_op("=", 1)) {
        std::string k = next().text;
        next();
        e.kwargs.emplace_back(std::move(k), expression());
      } else {
        if (!e.kwargs.empty()) error(line_, "positional argument after keyword argument");
        e.kids.push_back(expression());
      }
    } while (accept_op(","));
    expect_op(")");
  }
  ExprP filters(ExprP e) {
    for (;;) {
      if (accept_op("|")) {
        auto f = make(EK::kFilter);
        f->name = name();
        f->kids.push_back(std::move(e));
        if (accept_op("(")) call_args(*f);
        e = std::move(f);
      } else if (is_name("is")) {
        next();
        auto t = make(EK::kTest);
        if (accept_name("not")) t->negated = true;
        // Test names may be keywords (none, true, false, in).
        if (peek().type != Tok::kName) error(line_, "expected a test name after 'is'");
        t->name = next().text;
        t->kids.push_back(std::move(e));
        if (accept_op("(")) {
          call_args(*t);
        } else if (peek().type == Tok::kInt || peek().type == Tok::kFloat ||
                   peek().type == Tok::kString ||
                   (peek().type == Tok::kName && !is_name("and") && !is_name("or") &&
                    !is_name("if") && !is_name("else") && !is_name("is") && !is_name("in") &&
                    !is_name("not"))) {
          t->kids.push_back(postfix(primary()));
        }
        e = std::move(t);
      } else {
        return e;
      }
    }
  }
  ExprP postfix(ExprP e) {
    for (;;) {
      if (accept_op(".")) {
        auto a = make(EK::kAttr);
        if (peek().type == Tok::kInt) {
          a->kind = EK::kItem;
          auto idx = make(EK::kLiteral);
          const std::string text = next().text;
          int64_t index = 0;
          const auto r = std::from_chars(text.data(), text.data() + text.size(), index);
          if (r.ec != std::errc()) error(line_, "index ." + text.substr(0, 24) + " out of range");
          idx->value = Value::integer(index);
          a->kids.push_back(std::move(e));
          a->kids.push_back(std::move(idx));
        } else {
          a->name = name();
          a->kids.push_back(std::move(e));
        }
        e = std::move(a);
      } else if (accept_op("[")) {
        DepthGuard g(depth_, limits_.max_depth, line_);
        ExprP parts[3];
        int colons = 0;
        if (!is_op(":")) parts[0] = expression();
        while (colons < 2 && accept_op(":")) {
          ++colons;
          if (!is_op(":") && !is_op("]")) parts[colons] = expression();
        }
        expect_op("]");
        if (colons == 0) {
          auto it = make(EK::kItem);
          it->kids.push_back(std::move(e));
          it->kids.push_back(std::move(parts[0]));
          e = std::move(it);
        } else {
          auto sl = make(EK::kSlice);
          sl->kids.push_back(std::move(e));
          for (auto& p : parts) sl->kids.push_back(std::move(p));
          e = std::move(sl);
        }
      } else if (accept_op("(")) {
        DepthGuard g(depth_, limits_.max_depth, line_);
        auto c = make(EK::kCall);
        auto callee = std::move(e);
        call_args(*c);
        c->kids.insert(c->kids.begin(), std::move(callee));
        e = std::move(c);
      } else {
        return e;
      }
    }
  }
  ExprP primary() {
    DepthGuard g(depth_, limits_.max_depth, line_);
    const Token& t = peek();
    if (t.type == Tok::kString) {
      auto e = make(EK::kLiteral);
      std::string s = next().text;
      while (peek().type == Tok::kString) s += next().text;  // adjacent literals concatenate
      e->value = Value::string(std::move(s));
      return e;
    }
    if (t.type == Tok::kInt) {
      auto e = make(EK::kLiteral);
      const std::string text = next().text;
      int64_t v = 0;
      auto r = std::from_chars(text.data(), text.data() + text.size(), v);
      if (r.ec != std::errc()) {
        e->value = Value::number(std::strtod(text.c_str(), nullptr));
      } else {
        e->value = Value::integer(v);
      }
      return e;
    }
    if (t.type == Tok::kFloat) {
      auto e = make(EK::kLiteral);
      e->value = Value::number(std::strtod(next().text.c_str(), nullptr));
      return e;
    }
    if (t.type == Tok::kName) {
      const std::string n = next().text;
      auto e = make(EK::kLiteral);
      if (n == "true" || n == "True") {
        e->value = Value::boolean(true);
      } else if (n == "false" || n == "False") {
        e->value = Value::boolean(false);
      } else if (n == "none" || n == "None") {
        e->value = Value::none();
      } else {
        e->kind = EK::kName;
        e->name = n;
      }
      return e;
    }
    if (accept_op("(")) {
      if (accept_op(")")) {
        return make(EK::kList);
      }
      ExprP first = expression();
      if (is_op(",")) {
        auto l = make(EK::kList);
        l->kids.push_back(std::move(first));
        while (accept_op(",")) {
          if (is_op(")")) break;
          l->kids.push_back(expression());
        }
        expect_op(")");
        return l;
      }
      expect_op(")");
      return first;
    }
    if (accept_op("[")) {
      auto l = make(EK::kList);
      if (!accept_op("]")) {
        do {
          if (is_op("]")) break;
          l->kids.push_back(expression());
        } while (accept_op(","));
        expect_op("]");
      }
      return l;
    }
    if (accept_op("{")) {
      auto d = make(EK::kDict);
      if (!accept_op("}")) {
        do {
          if (is_op("}")) break;
          d->kids.push_back(expression());
          expect_op(":");
          d->kids.push_back(expression());
        } while (accept_op(","));
        expect_op("}");
      }
      return d;
    }
    error(line_,
          t.type == Tok::kEnd ? "unexpected end of expression" : "unexpected '" + t.text + "'");
  }

  std::vector<Segment> segs_;
  const Limits& limits_;
  size_t seg_ = 0;
  std::vector<Token>* toks_ = nullptr;
  size_t at_ = 0;
  int line_ = 0;
  int depth_ = 0;
};

// ---------------------------------------------------------------------------------------------
// Evaluation

enum class Flow { kNormal, kBreak, kContinue };

struct Macro {
  const Node* node;
};

class Renderer {
 public:
  Renderer(const Limits& limits, std::string& out) : limits_(limits), out_(&out) {}

  void run(const Body& body, const nlohmann::ordered_json& context) {
    scopes_.emplace_back();
    auto& g = scopes_.back();
    install_globals(g);
    if (context.is_object()) {
      for (const auto& [k, v] : context.items()) g[k] = from_json(v);
    }
    exec(body);
  }

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

  Value lookup(const std::string& name) const {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      auto f = it->find(name);
      if (f != it->end()) return f->second;
    }
    return Value::undefined(name);
  }

  void install_globals(Scope& g) {
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

  Flow exec(const Body& body) {
    for (const auto& n : body) {
      const Flow f = exec(*n);
      if (f != Flow::kNormal) return f;
    }
    return Flow::kNormal;
  }

  void assign(const std::string& name, Value v) { scopes_.back()[name] = std::move(v); }

  void unpack(const std::vector<std::string>& targets, const Value& v, int line) {
    if (targets.size() == 1) {
      assign(targets[0], v);
      return;
    }
    Array items = iterate(v, line);
    if (items.size() != targets.size()) {
      error(line,
            fmt::format("cannot unpack {} values into {} names", items.size(), targets.size()));
    }
    for (size_t k = 0; k < targets.size(); ++k) assign(targets[k], items[k]);
  }

  Flow exec(const Node& n) {
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
        assign(n.targets[0],
               Value::function([this, node](Args& a) { return call_macro(*node, a); }));
        return Flow::kNormal;
      }
      case NK::kBreak:
        return Flow::kBreak;
      case NK::kContinue:
        return Flow::kContinue;
    }
    return Flow::kNormal;
  }

  Value call_macro(const Node& n, Args& a) {
    DepthGuard g(depth_, limits_.max_depth, n.line);
    if (a.pos.size() > n.params.size())
      error(n.line, "too many arguments to macro " + n.targets[0]);
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

  Array iterate(const Value& v, int line) {
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

  Flow exec_for(const Node& n) {
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

  // --- expressions ---

  Value eval(const Expr& e) {
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

  Args args(const Expr& e, size_t first) {
    Args a;
    for (size_t k = first; k < e.kids.size(); ++k) a.pos.push_back(eval(*e.kids[k]));
    for (const auto& [name, x] : e.kwargs) a.kw.emplace_back(name, eval(*x));
    return a;
  }

  static int64_t norm_index(int64_t k, int64_t len) { return k < 0 ? k + len : k; }

  Value get_item(const Value& v, const Value& key, int line) {
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

  Value slice(const Expr& e) {
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

  static std::string strip_chars(const std::string& s, const std::string* chars, bool left,
                                 bool right) {
    auto in = [&](char c) { return chars ? chars->find(c) != std::string::npos : is_space(c); };
    size_t b = 0, e = s.size();
    if (left)
      while (b < e && in(s[b])) ++b;
    if (right)
      while (e > b && in(s[e - 1])) --e;
    return s.substr(b, e - b);
  }

  Array split(const std::string& s, const Value* sep, int64_t maxsplit, int line) {
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

  static std::string lower(std::string s) {
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
  }
  static std::string upper(std::string s) {
    for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    return s;
  }
  static std::string title(const std::string& s) {
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
  static std::string capitalize(const std::string& s) {
    std::string out = lower(s);
    if (!out.empty()) out[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(out[0])));
    return out;
  }

  std::string replace(const std::string& s, const std::string& from, const std::string& to,
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

  Value method(const Value& self, const std::string& name, int line) {
    Value bound = self;
    auto fn = [&](auto f) {
      return Value::function(
          [this, bound, f, line](Args& a) -> Value { return f(*this, bound, a, line); });
    };
    auto str_arg = [](const Args& a, size_t k, const char* what, int ln) -> const std::string& {
      if (k >= a.pos.size() || a.pos[k].kind != Kind::kString)
        error(ln, std::string(what) + " takes a string");
      return a.pos[k].s;
    };
    if (self.kind == Kind::kString) {
      if (name == "startswith" || name == "endswith") {
        const bool starts = name == "startswith";
        return fn([starts](Renderer&, const Value& s, Args& a, int ln) {
          if (a.pos.empty()) error(ln, "startswith/endswith take a string");
          auto check = [&](const std::string& p) {
            return starts ? s.s.rfind(p, 0) == 0
                          : s.s.size() >= p.size() &&
                                s.s.compare(s.s.size() - p.size(), p.size(), p) == 0;
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
      if (name == "strip" || name == "lstrip" || name == "rstrip") {
        const bool l = name != "rstrip", r = name != "lstrip";
        return fn([l, r](Renderer&, const Value& s, Args& a, int ln) {
          const Value* c = a.get(0, "chars");
          if (c && c->kind != Kind::kString && c->kind != Kind::kNone)
            error(ln, "strip() takes a string");
          return Value::string(
              strip_chars(s.s, c && c->kind == Kind::kString ? &c->s : nullptr, l, r));
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
        return fn(
            [](Renderer&, const Value& s, Args&, int) { return Value::string(capitalize(s.s)); });
      }
      if (name == "replace") {
        return fn([str_arg](Renderer& R, const Value& s, Args& a, int ln) {
          const Value* c = a.get(2, "count");
          return Value::string(R.replace(s.s, str_arg(a, 0, "replace()", ln),
                                         str_arg(a, 1, "replace()", ln), c ? c->as_int() : -1, ln));
        });
      }
      if (name == "find" || name == "count" || name == "index") {
        const std::string which = name;
        return fn([which, str_arg](Renderer&, const Value& s, Args& a, int ln) {
          const std::string& sub = str_arg(a, 0, "find()/count()", ln);
          if (which == "count") {
            if (sub.empty()) return Value::integer(static_cast<int64_t>(char_count(s.s)) + 1);
            int64_t n = 0;
            for (size_t k = s.s.find(sub); k != std::string::npos;
                 k = s.s.find(sub, k + sub.size()))
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
    } else if (self.kind == Kind::kObject && !self.o->is_namespace) {
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
    }
    return Value::undefined(name);
  }

  Value get_attr(const Value& v, const std::string& name, int line) {
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

  Value binary(const Expr& e) {
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
      error(line,
            "'" + (l.is_undefined() ? l.undefined_name : r.undefined_name) + "' is undefined");
    }
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
    if (!l.is_number() || !r.is_number()) {
      error(line, "unsupported operand types for " + op);
    }
    const bool ints = l.kind != Kind::kFloat && r.kind != Kind::kFloat;
    if (ints) {
      const int64_t a = l.as_int(), b = r.as_int();
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
    }
    const double a = l.as_double(), b = r.as_double();
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

  bool test(const std::string& name, const Value& v, Args& a, int line) {
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

  std::vector<Value> select(const Array& items, Args& a, size_t first, bool want, bool by_attr,
                            int line) {
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
      const Value x = by_attr ? (item.kind == Kind::kObject ? get_attr(item, attr, line)
                                                            : Value::undefined(attr))
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

  Value filter(const std::string& name, const Value& v, Args& a, int line) {
    if (name == "trim") {
      const Value* c = a.get(0, "chars");
      return Value::string(
          strip_chars(str(v), c && c->kind == Kind::kString ? &c->s : nullptr, true, true));
    }
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
    if (name == "lower") return Value::string(lower(str(v)));
    if (name == "upper") return Value::string(upper(str(v)));
    if (name == "title") return Value::string(title(str(v)));
    if (name == "capitalize") return Value::string(capitalize(str(v)));
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
    if (name == "default" || name == "d") {
      const Value* def = a.get(0, "default_value");
      const Value* boolean = a.get(1, "boolean");
      const bool use = v.is_undefined() || (boolean && truthy(*boolean) && !truthy(v));
      return use ? (def ? *def : Value::string("")) : v;
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
    if (name == "replace") {
      if (a.pos.size() < 2 || a.pos[0].kind != Kind::kString || a.pos[1].kind != Kind::kString) {
        error(line, "replace needs two strings");
      }
      const Value* c = a.get(2, "count");
      return Value::string(replace(str(v), a.pos[0].s, a.pos[1].s, c ? c->as_int() : -1, line));
    }
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
    if (name == "map") {
      Array out;
      const Value* attr = a.kwarg("attribute");
      for (const Value& x : iterate(v, line)) {
        step(line);
        if (attr) {
          if (attr->kind != Kind::kString) error(line, "map attribute must be a string");
          Value y =
              x.kind == Kind::kObject ? get_attr(x, attr->s, line) : Value::undefined(attr->s);
          if (y.is_undefined()) {
            if (const Value* d = a.kwarg("default")) y = *d;
          }
          out.push_back(y);
        } else {
          if (a.pos.empty() || a.pos[0].kind != Kind::kString)
            error(line, "map needs a filter name");
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
    error(line, "unknown filter '" + name + "'");
  }

  const Limits& limits_;
  std::string* out_;
  std::vector<Scope> scopes_;
  size_t steps_ = 0;
  int depth_ = 0;
};

}  // namespace

struct Template::Impl {
  Limits limits;
  Body body;
};

Template::Template(std::string_view source, const Limits& limits)
    : impl_(std::make_unique<Impl>()) {
  impl_->limits = limits;
  if (source.size() > limits.max_source) error(0, "the template is too long");
  Parser parser(Lexer(source).run(), impl_->limits);
  impl_->body = parser.parse();
}

Template::~Template() = default;
Template::Template(Template&&) noexcept = default;
Template& Template::operator=(Template&&) noexcept = default;

std::string Template::render(const nlohmann::ordered_json& context) const {
  std::string out;
  Renderer r(impl_->limits, out);
  r.run(impl_->body, context);
  return out;
}

}  // namespace steermoe::jinja
