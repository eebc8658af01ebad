// The renderer on its own (src/template/renderer.cpp, builtins.cpp, value.cpp): statements,
// scopes, Python's arithmetic and str(), the filters, tests and methods, and render-time errors.
// Trees come from the parser except in the first test, which builds one by hand.
#include "template/renderer.hpp"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "../error_text.hpp"
#include "template/jinja.hpp"
#include "template/lexer.hpp"
#include "template/parser.hpp"

namespace steermoe::jinja::detail {
namespace {

using Json = nlohmann::ordered_json;

std::string render(const std::string& source, const Json& context = Json::object(),
                   const Limits& limits = {}) {
  const Body body = parse(lex(source), limits);
  std::string out;
  Renderer(limits, out).run(body, context);
  return out;
}

// The message of the TemplateError rendering throws, or "" when it renders.
std::string render_error(const std::string& source, const Json& context = Json::object(),
                         const Limits& limits = {}) {
  return test_support::error_text<TemplateError>([&] { render(source, context, limits); });
}

ExprP literal(Value v) {
  auto e = std::make_unique<Expr>();
  e->kind = EK::kLiteral;
  e->value = std::move(v);
  return e;
}

TEST(JinjaRenderer, RendersAHandBuiltTree) {
  // "n=" then {{ n * 2 }}, with n from the context.
  Body body;
  auto text = std::make_unique<Node>();
  text->kind = NK::kText;
  text->text = "n=";
  body.push_back(std::move(text));
  auto name = std::make_unique<Expr>();
  name->kind = EK::kName;
  name->name = "n";
  auto times = std::make_unique<Expr>();
  times->kind = EK::kBinary;
  times->name = "*";
  times->kids.push_back(std::move(name));
  times->kids.push_back(literal(Value::integer(2)));
  auto out = std::make_unique<Node>();
  out->kind = NK::kOutput;
  out->expr = std::move(times);
  body.push_back(std::move(out));
  std::string text_out;
  const Limits limits;
  Renderer(limits, text_out).run(body, Json{{"n", 21}});
  EXPECT_EQ(text_out, "n=42");
}

TEST(JinjaRenderer, ValuesPrintAsPython) {
  const Json ctx = {{"l", {1, "a", nullptr, true, 2.5}}, {"d", {{"k", "v"}}}, {"q", "it's"}};
  EXPECT_EQ(render("{{ l }}|{{ d }}|{{ q }}|{{ [q] }}", ctx),
            R"([1, 'a', None, True, 2.5]|{'k': 'v'}|it's|["it's"])");
  EXPECT_EQ(render("{{ 1e16 }} {{ 1e15 }} {{ 0.0001 }} {{ 0.00001 }} {{ 3.0 }} {{ -0.5 }}"),
            "1e+16 1000000000000000.0 0.0001 1e-05 3.0 -0.5");
  EXPECT_EQ(render("[{{ nothing }}]"), "[]");  // undefined prints as nothing
}

TEST(JinjaRenderer, ArithmeticFollowsPython) {
  EXPECT_EQ(render("{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 // -2 }} {{ -7 % 3 }} {{ 7 % -3 }}"),
            "3 -4 -4 2 -2");
  EXPECT_EQ(render("{{ 1 / 2 }} {{ 4 / 2 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ -7.5 // 2 }}"),
            "0.5 2.0 1024 0.5 -4.0");
  EXPECT_EQ(render("{{ 1 + true }} {{ 'ab' * 3 }} {{ [0] * 2 }} {{ 'a' ~ 1 ~ none }}"),
            "2 ababab [0, 0] a1None");
  EXPECT_EQ(render("{{ 1 == 1.0 }} {{ [1, 2] < [1, 3] }} {{ 'b' in 'abc' }} {{ 3 not in [1] }}"),
            "True True True True");
  EXPECT_EQ(render("{{ 0 or 'x' }} {{ 1 and 0 }} {{ 'y' if none else 'n' }}"), "x 0 n");
}

TEST(JinjaRenderer, Statements) {
  EXPECT_EQ(render("{% for x in [1, 2, 3] %}{{ loop.index }}{{ x }}{% if not loop.last %},"
                   "{% endif %}{% endfor %}"),
            "11,22,33");
  EXPECT_EQ(render("{% for x in xs %}{{ loop.previtem }}>{{ x }}>{{ loop.nextitem }};"
                   "{% endfor %}",
                   {{"xs", {"a", "b"}}}),
            ">a>b;a>b>;");
  EXPECT_EQ(render("{% for x in [] %}x{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(render("{% for x in range(10) if x is odd %}{% if x > 6 %}{% break %}{% endif %}"
                   "{% if x == 3 %}{% continue %}{% endif %}{{ x }}{% endfor %}"),
            "15");
  EXPECT_EQ(render("{% for k, v in d.items() %}{{ k }}={{ v }} {% endfor %}",
                   {{"d", {{"b", 1}, {"a", 2}}}}),
            "b=1 a=2 ");
  EXPECT_EQ(render("{% for c in 'hé' %}[{{ c }}]{% endfor %}"), "[h][é]");
}

TEST(JinjaRenderer, ScopesAndAssignments) {
  // A set inside a loop is local to the iteration; a namespace carries values out.
  EXPECT_EQ(render("{% set x = 1 %}{% for i in [1, 2] %}{% set x = i %}{% endfor %}{{ x }}"), "1");
  EXPECT_EQ(render("{% set ns = namespace(n=0) %}{% for i in [1, 2, 3] %}{% set ns.n = ns.n + i %}"
                   "{% endfor %}{{ ns.n }}"),
            "6");
  EXPECT_EQ(render("{% set a, b = [1, 2] %}{{ b }}{{ a }}"), "21");
  EXPECT_EQ(render("{% set t %}<{{ 1 + 1 }}>{% endset %}{{ t | length }}{{ t }}"), "3<2>");
  EXPECT_EQ(render("{% macro m(a, b='B') %}{{ a }}{{ b }}{% endmacro %}{{ m(1) }}|{{ m(1, b=2) }}"
                   "|{{ m('x', 'y') }}"),
            "1B|12|xy");
}

TEST(JinjaRenderer, ItemsAttributesAndSlices) {
  const Json ctx = {{"s", "héllo"}, {"l", {1, 2, 3, 4}}, {"d", {{"k", {{"n", 5}}}}}};
  EXPECT_EQ(render("{{ s[1] }}{{ s[-1] }}{{ s[1:3] }}{{ s[::-1] }}[{{ s[10] }}]", ctx),
            "éoélolléh[]");  // code points, not bytes
  EXPECT_EQ(render("{{ l[1:] }} {{ l[:-1] }} {{ l[::2] }} {{ l[-2:] }} {{ l[5:9] }}", ctx),
            "[2, 3, 4] [1, 2, 3] [1, 3] [3, 4] []");
  EXPECT_EQ(render("{{ d.k.n }} {{ d['k']['n'] }} {{ d.k.missing is defined }}", ctx), "5 5 False");
}

TEST(JinjaRenderer, Filters) {
  const Json ctx = {{"msgs", {{{"role", "user"}, {"n", 2}}, {{"role", "bot"}, {"n", 1}}}},
                    {"d", {{"b", 1}, {"A", 2}}}};
  EXPECT_EQ(render("{{ msgs | map(attribute='role') | join(',') }}", ctx), "user,bot");
  EXPECT_EQ(render("{{ msgs | selectattr('role', 'eq', 'bot') | list | length }}", ctx), "1");
  EXPECT_EQ(render("{{ msgs | sort(attribute='n') | map(attribute='n') | list }}", ctx), "[1, 2]");
  EXPECT_EQ(render("{{ d | dictsort }}", ctx), "[['A', 2], ['b', 1]]");
  EXPECT_EQ(render("{{ d | tojson }}|{{ [1, 'é'] | tojson(indent=2) }}", ctx),
            "{\"b\": 1, \"A\": 2}|[\n  1,\n  \"é\"\n]");
  EXPECT_EQ(render("{{ '  x ' | trim }}|{{ 'a\nb' | indent(2, true) }}|{{ '<&>' | e }}"),
            "x|  a\n  b|&lt;&amp;&gt;");
  EXPECT_EQ(render("{{ none | default('d') }}{{ nope | default('d') }}{{ '' | d('e', true) }}"),
            "Nonede");
  EXPECT_EQ(render("{{ [3, 1, 3] | unique | list }} {{ [1, 2.5] | sum }} {{ [2, 1] | min }}"),
            "[3, 1] 3.5 1");
  EXPECT_EQ(render("{{ '12' | int + 1 }} {{ 'x' | int }} {{ 2.7 | int }} {{ 2.567 | round(2) }}"),
            "13 0 2 2.57");
  EXPECT_EQ(render("{{ [1, 0, 2] | select | list }} {{ [1, 2, 3] | reject('odd') | list }}"),
            "[1, 2] [2]");
}

TEST(JinjaRenderer, TestsAndMethods) {
  EXPECT_EQ(render("{{ 4 is even }}{{ 'A' is upper }}{{ x is undefined }}{{ {} is mapping }}"
                   "{{ 6 is divisibleby 3 }}{{ none is none }}"),
            "TrueTrueTrueTrueTrueTrue");
  EXPECT_EQ(render("{{ 'a,b,,c'.split(',') }} {{ ' a  b '.split() }} {{ 'a b c'.split(none, 1) }}"),
            "['a', 'b', '', 'c'] ['a', 'b'] ['a', 'b c']");
  EXPECT_EQ(render("{{ 'xhix'.strip('x') }} {{ 'abc'.startswith(('z', 'a')) }} "
                   "{{ 'aaa'.replace('a', 'b', 2) }} {{ 'héllo'.find('l') }} {{ 'ab'.count('') }}"),
            "hi True bba 2 3");
  EXPECT_EQ(
      render("{{ 'a\r\nb\n'.splitlines() }} {{ '-'.join(['x', 'y']) }} {{ 'hi there'.title() }}"),
      "['a', 'b'] x-y Hi There");
  EXPECT_EQ(
      render("{{ d.get('k') }} {{ d.get('z', 0) }} {{ d.keys() | list }} {{ d.values() | list }}",
             {{"d", {{"k", 1}}}}),
      "1 0 ['k'] [1]");
}

TEST(JinjaRenderer, RenderErrors) {
  const Json ctx = {{"xs", {1, 2}}, {"n", nullptr}};
  const std::pair<const char*, const char*> cases[] = {
      {"{{ nope.attr }}", "line 1: 'nope' is undefined (reading .attr)"},
      {"{{ n.attr }}", "line 1: None has no attribute 'attr'"},
      {"{{ 1 / 0 }}", "line 1: division by zero"},
      {"{{ 1 // 0 }}", "line 1: integer division or modulo by zero"},
      {"{{ xs + 1 }}", "line 1: unsupported operand types for +"},
      {"{{ 'a' < 1 }}", "line 1: cannot order these values"},
      {"\n{{ nope() }}", "line 2: 'nope' is undefined"},
      {"{{ xs | nofilter }}", "line 1: unknown filter 'nofilter'"},
      {"{{ 1 is nothing }}", "line 1: unknown test 'nothing'"},
      {"{{ 9223372036854775807 + 1 }}", "line 1: integer overflow"},
      {"{% set x.y = 1 %}", "line 1: cannot assign an attribute of 'x' (not a namespace)"},
      {"{% set a, b = [1] %}", "line 1: cannot unpack 1 values into 2 names"},
      {"{{ raise_exception('boom') }}", "raise_exception: boom"},
      {"{{ range(1, 2, 0) }}", "range() step must not be zero"},
  };
  for (const auto& [source, message] : cases) {
    SCOPED_TRACE(source);
    EXPECT_EQ(render_error(source, ctx), message);
  }
}

TEST(JinjaRenderer, LimitsAreEnforced) {
  Limits small;
  small.max_output = 10;
  EXPECT_EQ(render("{{ 'x' * 10 }}", Json::object(), small), "xxxxxxxxxx");
  EXPECT_EQ(render_error("{{ 'x' * 11 }}", Json::object(), small), "line 1: repetition too long");
  EXPECT_EQ(render_error("{% for i in range(11) %}x{% endfor %}", Json::object(), small),
            "the rendered text is too long");  // text nodes carry no line
  Limits few;
  few.max_steps = 100;
  EXPECT_EQ(render_error("{% for i in range(1000) %}{% endfor %}", Json::object(), few),
            "the template ran too long");
  Limits shallow;
  shallow.max_depth = 30;
  EXPECT_EQ(render_error("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", Json::object(),
                         shallow),
            "line 1: the rendering nests too deeply");
}

}  // namespace
}  // namespace steermoe::jinja::detail
