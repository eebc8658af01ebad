// The parser on its own (src/template/parser.cpp): the shape of the syntax tree it builds
// (operator precedence, filters and tests, postfix forms, statements) and its parse errors.
// Trees are compared as S-expressions written by the dump functions below.
#include "template/parser.hpp"

#include <gtest/gtest.h>

#include <initializer_list>
#include <map>
#include <sstream>
#include <string>
#include <utility>

#include "../error_text.hpp"
#include "template/jinja.hpp"
#include "template/lexer.hpp"

namespace steermoe::jinja::detail {
namespace {

std::string dump(const ExprP& e);
std::string dump(const Body& body);

// The operands (and keyword arguments) of `e`, each preceded by a space.
std::string kids_of(const Expr& e) {
  std::ostringstream o;
  for (const ExprP& k : e.kids) o << ' ' << dump(k);
  for (const auto& [name, x] : e.kwargs) o << ' ' << name << '=' << dump(x);
  return o.str();
}

// Literals as Python's repr(), names bare, every other node as (head operands...); a null operand
// (an omitted slice part, a conditional without else) is "_".
std::string dump(const ExprP& p) {
  if (!p) return "_";
  const Expr& e = *p;
  std::ostringstream o;
  switch (e.kind) {
    case EK::kLiteral:
      return repr(e.value);
    case EK::kName:
      return e.name;
    case EK::kAttr:
      o << "(. " << dump(e.kids[0]) << ' ' << e.name << ')';
      break;
    case EK::kList:
    case EK::kDict: {
      const std::string kids = kids_of(e);
      o << (e.kind == EK::kList ? '[' : '{') << (kids.empty() ? kids : kids.substr(1))
        << (e.kind == EK::kList ? ']' : '}');
      break;
    }
    default: {
      static const std::map<EK, std::string> kHeads = {
          {EK::kItem, "[]"}, {EK::kSlice, "slice"}, {EK::kCall, "call"},
          {EK::kNeg, "neg"}, {EK::kPos, "pos"},     {EK::kNot, "not"},
          {EK::kAnd, "and"}, {EK::kOr, "or"},       {EK::kCond, "if"}};
      if (e.kind == EK::kFilter) {
        o << "(|" << e.name;
      } else if (e.kind == EK::kTest) {
        o << (e.negated ? "(is-not " : "(is ") << e.name;
      } else if (e.kind == EK::kBinary) {
        o << '(' << (e.negated ? "not " : "") << e.name;
      } else {
        o << '(' << kHeads.at(e.kind);
      }
      o << kids_of(e) << ')';
    }
  }
  return o.str();
}

// Statements as (keyword parts...), bodies as {statements}.
std::string dump(const Node& n) {
  std::ostringstream o;
  std::string names;
  for (const auto& t : n.targets) names += (names.empty() ? "" : ",") + t;
  switch (n.kind) {
    case NK::kText:
      return repr(Value::string(n.text));
    case NK::kOutput:
      o << "(out " << dump(n.expr) << ')';
      break;
    case NK::kIf:
      o << "(if";
      for (const auto& [cond, body] : n.branches)
        o << " [" << dump(cond) << ' ' << dump(body) << ']';
      o << " else " << dump(n.else_body) << ')';
      break;
    case NK::kFor:
      o << "(for " << names << ' ' << dump(n.expr);
      if (n.filter) o << " if " << dump(n.filter);
      o << ' ' << dump(n.body) << " else " << dump(n.else_body) << ')';
      break;
    case NK::kSet:
      o << "(set " << (n.attr_target ? "attr " : "") << names << ' ' << dump(n.expr) << ')';
      break;
    case NK::kSetBlock:
      o << "(setblock " << names << ' ' << dump(n.body) << ')';
      break;
    case NK::kMacro:
      o << "(macro " << names << " (";
      for (size_t k = 0; k < n.params.size(); ++k) {
        o << (k ? " " : "") << n.params[k].first;
        if (n.params[k].second) o << '=' << dump(n.params[k].second);
      }
      o << ") " << dump(n.body) << ')';
      break;
    case NK::kBreak:
      return "(break)";
    case NK::kContinue:
      return "(continue)";
  }
  return o.str();
}

std::string dump(const Body& body) {
  std::ostringstream o;
  o << '{';
  for (size_t k = 0; k < body.size(); ++k) o << (k ? " " : "") << dump(*body[k]);
  o << '}';
  return o.str();
}

std::string tree(const std::string& source, const Limits& limits = {}) {
  return dump(parse(lex(source), limits));
}

// The tree of one expression.
std::string expr(const std::string& text) {
  const Body body = parse(lex("{{ " + text + " }}"), {});
  EXPECT_EQ(body.size(), 1u);
  EXPECT_EQ(body[0]->kind, NK::kOutput);
  return dump(body[0]->expr);
}

// Each expression's tree.
void expect_trees(std::initializer_list<std::pair<const char*, const char*>> cases) {
  for (const auto& [text, want] : cases) EXPECT_EQ(expr(text), want) << text;
}

TEST(JinjaParser, Literals) {
  expect_trees({
      {"1", "1"},
      {"2.5", "2.5"},
      {"99999999999999999999", "1e+20"},  // beyond int64: a float, as Python prints it
      {"'a' \"b\"", "'ab'"},              // adjacent strings concatenate
      {"true", "True"},
      {"False", "False"},
      {"none", "None"},
      {"[1, 'x',]", "[1 'x']"},
      {"(1, 2)", "[1 2]"},  // tuples are lists
      {"()", "[]"},
      {"(x)", "x"},
      {"{'k': v, 'j': 2}", "{'k' v 'j' 2}"},
  });
}

TEST(JinjaParser, OperatorPrecedence) {
  expect_trees({
      {"1 + 2 * 3", "(+ 1 (* 2 3))"},
      {"1 - 2 - 3", "(- (- 1 2) 3)"},  // left associative
      {"a ~ b + c", "(+ (~ a b) c)"},  // '~' binds tighter than '+', as in Jinja
      {"a * b ~ c", "(~ (* a b) c)"},
      {"2 ** 3 * 4", "(* (** 2 3) 4)"},
      {"a // b % c", "(% (// a b) c)"},
      {"a < b == c", "(== (< a b) c)"},
      {"not a == b", "(not (== a b))"},
      {"a or b and not c", "(or a (and b (not c)))"},
      {"a in b", "(in a b)"},
      {"a not in b", "(not in a b)"},
      {"x if c", "(if x c _)"},
      {"x if c else y if d else z", "(if x c (if y d z))"},
  });
}

TEST(JinjaParser, UnaryFiltersAndTests) {
  expect_trees({
      {"-x", "(neg x)"},
      {"- - x", "(neg (neg x))"},
      {"+x", "(pos x)"},
      // A filter applies to the whole unary expression, as in Jinja: -1|abs is abs(-1).
      {"-x|abs", "(|abs (neg x))"},
      {"x|trim|upper", "(|upper (|trim x))"},
      {"x|join(', ', attribute='n')", "(|join x ', ' attribute='n')"},
      {"a + b|length", "(+ a (|length b))"},
      {"x is defined", "(is defined x)"},
      {"x is not none", "(is-not none x)"},
      {"x is divisibleby 3", "(is divisibleby x 3)"},
      {"x is divisibleby(3)", "(is divisibleby x 3)"},
      {"x is sameas y", "(is sameas x y)"},
      {"x is string and y", "(and (is string x) y)"},  // 'and' is not an argument
  });
}

TEST(JinjaParser, PostfixForms) {
  expect_trees({
      {"a.b.c", "(. (. a b) c)"},
      {"a.0", "([] a 0)"},
      {"a['k'][0]", "([] ([] a 'k') 0)"},
      {"a[1:]", "(slice a 1 _ _)"},
      {"a[:-1]", "(slice a _ (neg 1) _)"},
      {"a[::2]", "(slice a _ _ 2)"},
      {"f()", "(call f)"},
      {"f(1, x=2)", "(call f 1 x=2)"},
      {"s.split(',')[0].strip()", "(call (. ([] (call (. s split) ',') 0) strip))"},
  });
}

TEST(JinjaParser, Statements) {
  EXPECT_EQ(tree("a{{ x }}b"), "{'a' (out x) 'b'}");
  EXPECT_EQ(tree("{% if a %}1{% elif b %}2{% else %}3{% endif %}"),
            "{(if [a {'1'}] [b {'2'}] else {'3'})}");
  EXPECT_EQ(tree("{% for k, v in d.items() if v %}{{ k }}{% else %}none{% endfor %}"),
            "{(for k,v (call (. d items)) if v {(out k)} else {'none'})}");
  // The iterable of a for is not a conditional expression: its 'if' filters.
  EXPECT_EQ(tree("{% for x in xs if x %}{% endfor %}"), "{(for x xs if x {} else {})}");
  EXPECT_EQ(tree("{% set x = 1 %}{% set a, b = p %}{% set ns.n = 2 %}"),
            "{(set x 1) (set a,b p) (set attr ns,n 2)}");
  EXPECT_EQ(tree("{% set x %}t{{ y }}{% endset %}"), "{(setblock x {'t' (out y)})}");
  EXPECT_EQ(tree("{% macro m(a, b=2) %}{{ a }}{% endmacro %}"), "{(macro m (a b=2) {(out a)})}");
  EXPECT_EQ(tree("{% for x in xs %}{% break %}{% continue %}{% endfor %}"),
            "{(for x xs {(break) (continue)} else {})}");
  // transformers' generation block renders its body: an if on a constant True.
  EXPECT_EQ(tree("{% generation %}g{% endgeneration %}"), "{(if [True {'g'}] else {})}");
}

TEST(JinjaParser, NodesCarryTheirLine) {
  const Body body = parse(lex("a\n{{ x }}\n\n{% if y %}{% endif %}"), {});
  ASSERT_EQ(body.size(), 4u);  // 'a\n', x, '\n\n', if
  EXPECT_EQ(body[1]->line, 2);
  EXPECT_EQ(body[1]->expr->line, 2);
  EXPECT_EQ(body[3]->line, 4);
}

TEST(JinjaParser, ErrorsNameTheLine) {
  const std::pair<const char*, const char*> cases[] = {
      {"{% if x %}", "line 1: missing 'endif'"},
      {"{% for x in y %}\n", "line 1: missing 'endfor'"},
      {"a\n{% endfor %}", "line 2: unsupported statement 'endfor'"},
      {"{% if x %}{% endfor %}", "line 1: unsupported statement 'endfor'"},
      {"{% bogus %}", "line 1: unsupported statement 'bogus'"},
      {"{% include 'x' %}", "line 1: unsupported statement 'include'"},
      {"{% for x y %}{% endfor %}", "line 1: expected 'in' in for"},
      {"{% for x in y recursive %}{% endfor %}", "line 1: recursive loops are not supported"},
      {"{% set x, y %}{% endset %}", "line 1: block set needs one name"},
      {"{% macro m(a %}{% endmacro %}", "line 1: expected ')' after the macro parameters"},
      {"{{ 1 + }}", "line 1: unexpected end of expression"},
      {"{{ f(a=1, 2) }}", "line 1: positional argument after keyword argument"},
      {"{{ [1, 2 }}", "line 1: expected ']', found ''"},
      {"{{ x y }}", "line 1: unexpected 'y'"},
      {"{{ x is }}", "line 1: expected a test name after 'is'"},
      {"{{ s.99999999999999999999 }}", "line 1: index .99999999999999999999 out of range"},
      {"\n\n{% if %}", "line 3: unexpected end of expression"},
  };
  for (const auto& [source, message] : cases) {
    SCOPED_TRACE(source);
    EXPECT_EQ(test_support::error_text<TemplateError>([&] { parse(lex(source), {}); }), message);
  }
}

TEST(JinjaParser, NestingIsBounded) {
  Limits limits;
  limits.max_depth = 20;
  std::string ok, deep;
  for (int i = 0; i < 5; ++i) ok += "{% if x %}";
  for (int i = 0; i < 5; ++i) ok += "{% endif %}";
  EXPECT_NO_THROW(tree(ok, limits));
  for (int i = 0; i < 30; ++i) deep += "{% if x %}";
  EXPECT_THROW(tree(deep, limits), TemplateError);
  EXPECT_THROW(tree("{{ " + std::string(30, '(') + "1" + std::string(30, ')') + " }}", limits),
               TemplateError);
  EXPECT_THROW(tree("{{ " + std::string(30, '-') + "1 }}", limits), TemplateError);
}

}  // namespace
}  // namespace steermoe::jinja::detail
