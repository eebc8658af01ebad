// The lexer on its own (src/template/lexer.cpp): segments, the whitespace control transformers
// renders with (trim_blocks, lstrip_blocks, '-' and '+'), tokens and their line numbers, and the
// errors of an unterminated tag, comment or string.
#include "template/lexer.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "../error_text.hpp"
#include "template/jinja.hpp"

namespace steermoe::jinja::detail {
namespace {

// Segments as one line each: T'text' for text, {{ tokens }} / {% tokens %} for tags, tokens as
// kind:text (N name, I int, F float, S string, O operator), the final kEnd left out.
std::string show(const std::vector<Segment>& segs) {
  std::string out;
  for (const Segment& s : segs) {
    if (!out.empty()) out += ' ';
    if (s.kind == SegKind::kText) {
      out += "T'" + s.text + "'";
      continue;
    }
    out += s.kind == SegKind::kExpr ? "{{" : "{%";
    for (const Token& t : s.tokens) {
      static const char kKinds[] = {'N', 'I', 'F', 'S', 'O'};
      if (t.type != Tok::kEnd)
        out += std::string(" ") + kKinds[static_cast<int>(t.type)] + ':' + t.text;
    }
    out += s.kind == SegKind::kExpr ? " }}" : " %}";
  }
  return out;
}

std::string lexed(const std::string& source) {
  return show(lex(source));
}

TEST(JinjaLexer, SplitsTextAndTags) {
  EXPECT_EQ(lexed(""), "");
  EXPECT_EQ(lexed("plain { text }"), "T'plain { text }'");
  EXPECT_EQ(lexed("a{{ x }}b{% if y %}c"), "T'a' {{ N:x }} T'b' {% N:if N:y %} T'c'");
  EXPECT_EQ(lexed("a{# note #}b"), "T'a' T'b'");
  // Every tag ends with exactly one kEnd token.
  const auto segs = lex("{{ x }}");
  ASSERT_EQ(segs.size(), 1u);
  ASSERT_EQ(segs[0].tokens.size(), 2u);
  EXPECT_EQ(segs[0].tokens.back().type, Tok::kEnd);
}

TEST(JinjaLexer, Tokens) {
  EXPECT_EQ(lexed("{{ foo_1 _bar }}"), "{{ N:foo_1 N:_bar }}");
  // Numbers: '_' separators dropped; a float needs a digit after '.', or an exponent.
  EXPECT_EQ(lexed("{{ 1_000 2.5 3e2 4E-1 5. 6e }}"),
            "{{ I:1000 F:2.5 F:3e2 F:4E-1 I:5 O:. I:6 N:e }}");
  // Two-character operators win over their one-character prefixes.
  EXPECT_EQ(lexed("{{ a**b//c==d!=e<=f>=g<h>i }}"),
            "{{ N:a O:** N:b O:// N:c O:== N:d O:!= N:e O:<= N:f O:>= N:g O:< N:h O:> N:i }}");
  EXPECT_EQ(lexed("{{ x|f(1, k=[2]) ~ y.z % 3 }}"),
            "{{ N:x O:| N:f O:( I:1 O:, N:k O:= O:[ I:2 O:] O:) O:~ N:y O:. N:z O:% I:3 }}");
}

TEST(JinjaLexer, StringLiteralsAreDecoded) {
  const auto segs = lex(R"({{ 'a\n\t\\\'' "q\"x" '\u' 'line\
next' }})");
  ASSERT_EQ(segs.size(), 1u);
  const auto& t = segs[0].tokens;
  ASSERT_EQ(t.size(), 5u);
  for (size_t k = 0; k < 4; ++k) EXPECT_EQ(t[k].type, Tok::kString) << k;
  EXPECT_EQ(t[0].text, "a\n\t\\'");
  EXPECT_EQ(t[1].text, "q\"x");
  EXPECT_EQ(t[2].text, "\\u");  // unknown escapes stay as written
  EXPECT_EQ(t[3].text, "linenext");
}

TEST(JinjaLexer, DictBracesDoNotCloseAnExpression) {
  EXPECT_EQ(lexed("{{ {'a': {}} }}x"), "{{ O:{ S:a O:: O:{ O:} O:} }} T'x'");
  // In a statement only "%}" closes.
  EXPECT_EQ(lexed("{% set d = {} %}"), "{% N:set N:d O:= O:{ O:} %}");
}

TEST(JinjaLexer, WhitespaceControl) {
  // '-' strips all whitespace on its side, newlines included.
  EXPECT_EQ(lexed("a \n {{- x -}} \n b"), "T'a' {{ N:x }} T'b'");
  // trim_blocks: the first newline after a block tag or comment goes; not after an expression.
  EXPECT_EQ(lexed("{% if x %}\nA\n{{ y }}\nB"), "{% N:if N:x %} T'A\n' {{ N:y }} T'\nB'");
  EXPECT_EQ(lexed("{# c #}\r\nA"), "T'A'");
  // lstrip_blocks: spaces and tabs before a block tag at the start of a line go, not elsewhere.
  EXPECT_EQ(lexed("A\n  \t{% if x %}"), "T'A\n' {% N:if N:x %}");
  EXPECT_EQ(lexed("A  {% if x %}"), "T'A  ' {% N:if N:x %}");
  EXPECT_EQ(lexed("A\n  {{ x }}"), "T'A\n  ' {{ N:x }}");
  // '+' after the opening turns lstrip_blocks off for that tag.
  EXPECT_EQ(lexed("A\n  {%+ if x %}\nB"), "T'A\n  ' {% N:if N:x %} T'B'");
}

TEST(JinjaLexer, TokensCarryTheirLine) {
  const auto segs = lex("a\nb {{ x }}\n{% if\ny %}\n\n{{ z }}");
  std::vector<int> lines;
  for (const Segment& s : segs)
    if (s.kind != SegKind::kText) lines.push_back(s.tokens[0].line);
  EXPECT_EQ(lines, (std::vector<int>{2, 3, 6}));
}

TEST(JinjaLexer, ErrorsNameTheLine) {
  const std::pair<const char*, const char*> cases[] = {
      {"a\n{{ x", "line 2: unterminated tag"},
      {"{# open", "line 1: unterminated comment"},
      {"\n\n{{ 'abc }}", "line 3: unterminated string literal"},
      {"{{ a ; b }}", "line 1: unexpected character ';'"},
  };
  for (const auto& [source, message] : cases) {
    SCOPED_TRACE(source);
    EXPECT_EQ(test_support::error_text<TemplateError>([&] { lex(source); }), message);
  }
}

}  // namespace
}  // namespace steermoe::jinja::detail
