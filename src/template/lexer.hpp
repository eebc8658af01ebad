// The lexer of the Jinja subset: splits a template into text and tag segments, applying the
// whitespace control transformers uses (trim_blocks, lstrip_blocks, '-' and '+' markers), and
// turns each tag's body into tokens. Internal to src/template.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace steermoe::jinja::detail {

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

// The segments of `source`, text already trimmed; each tag's tokens end with Tok::kEnd. Throws
// TemplateError naming the line for an unterminated tag, comment or string, or a stray character.
std::vector<Segment> lex(std::string_view source);

}  // namespace steermoe::jinja::detail
