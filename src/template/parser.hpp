// The parser of the Jinja subset: lexer segments into a syntax tree of statements (Node) and
// expressions (Expr), by recursive descent with Jinja's operator precedence. Internal to
// src/template.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "template/jinja.hpp"
#include "template/lexer.hpp"
#include "template/value.hpp"

namespace steermoe::jinja::detail {

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

// The statements of a whole template. Throws TemplateError naming the line for a syntax error,
// an unsupported statement, or nesting deeper than limits.max_depth.
Body parse(std::vector<Segment> segments, const Limits& limits);

}  // namespace steermoe::jinja::detail
