// The Jinja subset against Python jinja2's renderings (tests/data/chat_template/expected.json,
// made by tools/chat_template/make_expected.py), plus the bounds that keep hostile templates safe.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "../json_test_util.hpp"
#include "template/jinja.hpp"

namespace steermoe::jinja {
namespace {

const std::string kData = std::string(STEERMOE_SOURCE_DIR) + "/tests/data/chat_template/";

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in) << path;
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

nlohmann::ordered_json expected() {
  return steermoe::parse_ordered_json_or_throw(slurp(kData + "expected.json"));
}

TEST(ChatTemplate, FamiliesMatchJinja2) {
  const auto cases = expected()["cases"];
  int checked = 0;
  for (const auto& c : cases) {
    if (!c.contains("template")) continue;
    const std::string name = c["template"];
    SCOPED_TRACE(name + " / " + c["conversation"].get<std::string>());
    Template t(slurp(kData + name));
    ASSERT_TRUE(c.contains("output"));
    EXPECT_EQ(t.render(c["context"]), c["output"].get<std::string>());
    ++checked;
  }
  EXPECT_GE(checked, 40);
}

TEST(ChatTemplate, SnippetsMatchJinja2) {
  const auto cases = expected()["cases"];
  int checked = 0;
  for (const auto& c : cases) {
    if (!c.contains("snippet")) continue;
    SCOPED_TRACE(c["snippet"].get<std::string>());
    Template t(c["source"].get<std::string>());
    if (c.contains("error")) {
      try {
        t.render(c["context"]);
        ADD_FAILURE() << "expected an error";
      } catch (const TemplateError& e) {
        EXPECT_NE(std::string(e.what()).find(c["error"].get<std::string>()), std::string::npos)
            << e.what();
      }
    } else {
      EXPECT_EQ(t.render(c["context"]), c["output"].get<std::string>());
    }
    ++checked;
  }
  EXPECT_GE(checked, 15);
}

TEST(ChatTemplate, ParseErrorsNameTheLine) {
  for (const char* bad :
       {"{% if x %}", "{{ x", "{% for %}", "{{ 1 + }}", "{% endfor %}", "{% bogus %}",
        "{{ 'unterminated }}", "a\n{% if %}\n", "{# never closed",
        "{{ s.99999999999999999999999 }}"}) {  // index out of range (was std::out_of_range)
    SCOPED_TRACE(bad);
    EXPECT_THROW(Template t(bad), TemplateError);
  }
  try {
    Template t("line one\nline two {% if %}");
    FAIL();
  } catch (const TemplateError& e) {
    EXPECT_NE(std::string(e.what()).find("line 2"), std::string::npos) << e.what();
  }
}

TEST(ChatTemplate, RenderErrorsAreTemplateErrors) {
  const nlohmann::ordered_json ctx = {{"xs", {1, 2}}, {"n", nullptr}};
  for (const char* bad :
       {"{{ nope.attr }}", "{{ n.attr }}", "{{ 1 / 0 }}", "{{ 1 // 0 }}", "{{ xs + 1 }}",
        "{{ 'a' < 1 }}", "{{ nope() }}", "{{ xs | nofilter }}", "{{ 1 is nothing }}",
        "{{ 9223372036854775807 + 1 }}", "{% set x.y = 1 %}", "{{ raise_exception('boom') }}"}) {
    SCOPED_TRACE(bad);
    Template t(bad);
    EXPECT_THROW(t.render(ctx), TemplateError);
  }
}

TEST(ChatTemplate, HostileTemplatesAreBounded) {
  const nlohmann::ordered_json ctx = nlohmann::ordered_json::object();
  // Output size, steps and depth each have a bound.
  Limits small;
  small.max_output = 1000;
  EXPECT_THROW(Template("{% for i in range(100000) %}xxxxxxxx{% endfor %}", small).render(ctx),
               TemplateError);
  EXPECT_THROW(Template("{{ 'x' * 100000000 }}").render(ctx), TemplateError);
  Limits few;
  few.max_steps = 10000;
  EXPECT_THROW(
      Template("{% for i in range(1000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}", few)
          .render(ctx),
      TemplateError);
  EXPECT_THROW(Template("{{ " + std::string(100000, '(') + "1" + std::string(100000, ')') + " }}"),
               TemplateError);
  EXPECT_THROW(Template("{{ " + std::string(100000, '-') + "1 }}"), TemplateError);
  EXPECT_THROW(Template("{{ x" + std::string(100000, '|') + "}}"), TemplateError);
  std::string nested;
  for (int i = 0; i < 5000; ++i) nested += "{% if true %}";
  EXPECT_THROW(Template t(nested), TemplateError);
  // Recursion through a macro.
  EXPECT_THROW(Template("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}").render(ctx),
               TemplateError);
}

TEST(ChatTemplate, KeepsContextKeyOrder) {
  nlohmann::ordered_json ctx;
  ctx["d"]["z"] = 1;
  ctx["d"]["a"] = 2;
  EXPECT_EQ(Template("{{ d | tojson }}|{% for k, v in d.items() %}{{ k }}{% endfor %}").render(ctx),
            "{\"z\": 1, \"a\": 2}|za");
}

}  // namespace
}  // namespace steermoe::jinja
