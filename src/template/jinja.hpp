// A Jinja2 subset interpreter for chat templates (the ones HF tokenizer_config.json files and
// GGUF `tokenizer.chat_template` carry), rendering as transformers' apply_chat_template does:
// trim_blocks and lstrip_blocks on, loop controls, `raise_exception`, a `tojson` that keeps key
// order and does not HTML-escape.
//
// Supported: {{ }}, {% %}, {# #} with '-' whitespace control; for (tuple targets, loop.index,
// index0, revindex, revindex0, first, last, length, previtem, nextitem, else, if filter),
// if/elif/else, set (names, namespace attributes, block set), macro/call of macros, break,
// continue, filter blocks no; expressions with literals, lists, dicts, tuples, slices,
// attributes, subscripts, calls, filters, tests, `in`, `~`, arithmetic, comparisons,
// and/or/not, conditional expressions; string, list and dict methods templates use.
//
// Every rendering is bounded (output size, steps, nesting depth): a hostile template or context
// gets a TemplateError, never a crash or a hang.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "common/error.hpp"

namespace steermoe::jinja {

class TemplateError : public steermoe::Error {
 public:
  using steermoe::Error::Error;
};

struct Limits {
  size_t max_output = 4u << 20;  // bytes rendered
  size_t max_steps = 5'000'000;  // statements + expressions evaluated
  int max_depth = 200;           // parse and evaluation nesting
  size_t max_source = 1u << 20;  // template bytes
};

class Template {
 public:
  // Parses `source`; throws TemplateError naming the line.
  explicit Template(std::string_view source, const Limits& limits = {});
  ~Template();
  Template(Template&&) noexcept;
  Template& operator=(Template&&) noexcept;

  // Renders with `context`'s keys as variables (plus the globals raise_exception, namespace,
  // range, strftime_now). Throws TemplateError for raise_exception and for errors at render time.
  std::string render(const nlohmann::ordered_json& context) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace steermoe::jinja
