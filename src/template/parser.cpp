// The parser: statements by keyword ({% if %}, {% for %}, ...) over the segment list, expressions
// by recursive descent over each tag's tokens, lowest precedence first (conditional, or, and, not,
// comparisons, + -, ~, * / // %, **, unary, filters and tests, postfix, primary). Every recursion
// counts against Limits::max_depth so a hostile template cannot overflow the stack.
#include "template/parser.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>

namespace steermoe::jinja::detail {
namespace {

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
      parse_if(*n);
    } else if (kw == "for") {
      parse_for(*n);
    } else if (kw == "set") {
      parse_set(*n);
    } else if (kw == "macro") {
      parse_macro(*n);
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

  // {% if %} ... {% elif %} ... {% else %} ... {% endif %}: the branches in order.
  void parse_if(Node& n) {
    n.kind = NK::kIf;
    ExprP cond = expression();
    expect_end();
    Body b = parse_body({"elif", "else", "endif"});
    n.branches.emplace_back(std::move(cond), std::move(b));
    for (;;) {
      const std::string k = keyword_here();
      ++seg_;
      if (k == "elif") {
        ExprP c = expression();
        expect_end();
        Body bb = parse_body({"elif", "else", "endif"});
        n.branches.emplace_back(std::move(c), std::move(bb));
      } else if (k == "else") {
        expect_end();
        n.else_body = parse_body({"endif"});
        keyword_here();
        ++seg_;
        expect_end();
        break;
      } else {
        expect_end();
        break;
      }
    }
  }

  // {% for targets in iterable [if filter] %} ... [{% else %} ...] {% endfor %}.
  void parse_for(Node& n) {
    n.kind = NK::kFor;
    n.targets.push_back(name());
    while (accept_op(",")) n.targets.push_back(name());
    if (!accept_name("in")) error(line_, "expected 'in' in for");
    n.expr = expression(/*no_cond=*/true);
    if (accept_name("if")) n.filter = expression(true);
    accept_name("recursive") ? error(line_, "recursive loops are not supported") : void();
    expect_end();
    n.body = parse_body({"else", "endfor"});
    if (keyword_here() == "else") {
      ++seg_;
      expect_end();
      n.else_body = parse_body({"endfor"});
      keyword_here();
    }
    ++seg_;
    expect_end();
  }

  // {% set names = expr %}, {% set ns.attr = expr %} or the block {% set name %}...{% endset %}.
  void parse_set(Node& n) {
    std::string first = name();
    if (accept_op(".")) {
      n.attr_target = true;
      n.targets = {first, name()};
    } else {
      n.targets.push_back(first);
      while (accept_op(",")) n.targets.push_back(name());
    }
    if (accept_op("=")) {
      n.kind = NK::kSet;
      n.expr = expression();
      expect_end();
    } else {
      if (n.attr_target || n.targets.size() != 1) error(line_, "block set needs one name");
      n.kind = NK::kSetBlock;
      expect_end();
      n.body = parse_body({"endset"});
      keyword_here();
      ++seg_;
      expect_end();
    }
  }

  // {% macro name(params) %} ... {% endmacro %}; parameters may have defaults.
  void parse_macro(Node& n) {
    n.kind = NK::kMacro;
    n.targets.push_back(name());
    if (!accept_op("(")) error(line_, "expected '(' after the macro name");
    if (!accept_op(")")) {
      do {
        std::string p = name();
        ExprP def;
        if (accept_op("=")) def = expression();
        n.params.emplace_back(std::move(p), std::move(def));
      } while (accept_op(","));
      if (!accept_op(")")) error(line_, "expected ')' after the macro parameters");
    }
    expect_end();
    n.body = parse_body({"endmacro"});
    keyword_here();
    ++seg_;
    expect_end();
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
    if (t.type == Tok::kString || t.type == Tok::kInt || t.type == Tok::kFloat ||
        t.type == Tok::kName) {
      return literal_or_name();
    }
    if (ExprP e = bracketed()) return e;
    error(line_,
          t.type == Tok::kEnd ? "unexpected end of expression" : "unexpected '" + t.text + "'");
  }

  // A string (adjacent ones concatenated), number, true / false / none, or a variable name.
  ExprP literal_or_name() {
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
    return nullptr;  // not reached: primary() checked the token type
  }

  // A parenthesised expression or tuple (a list here), a list or a dict display; nullptr when
  // the next token opens none of them.
  ExprP bracketed() {
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
    return nullptr;
  }

  std::vector<Segment> segs_;
  const Limits& limits_;
  size_t seg_ = 0;
  std::vector<Token>* toks_ = nullptr;
  size_t at_ = 0;
  int line_ = 0;
  int depth_ = 0;
};

}  // namespace

Body parse(std::vector<Segment> segments, const Limits& limits) {
  return Parser(std::move(segments), limits).parse();
}

}  // namespace steermoe::jinja::detail
