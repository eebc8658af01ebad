// The Jinja subset interpreter: lexer.cpp applies whitespace control while it splits the source,
// parser.cpp builds a small syntax tree by recursive descent, renderer.cpp and builtins.cpp walk
// it over the dynamically typed Values of value.cpp, which follow Python's semantics where
// templates can observe them (truthiness, equality, str() and repr(), slicing, arithmetic).
#include "template/jinja.hpp"

#include "template/lexer.hpp"
#include "template/parser.hpp"
#include "template/renderer.hpp"

namespace steermoe::jinja {

struct Template::Impl {
  Limits limits;
  detail::Body body;
};

Template::Template(std::string_view source, const Limits& limits)
    : impl_(std::make_unique<Impl>()) {
  impl_->limits = limits;
  if (source.size() > limits.max_source) detail::error(0, "the template is too long");
  impl_->body = detail::parse(detail::lex(source), impl_->limits);
}

Template::~Template() = default;
Template::Template(Template&&) noexcept = default;
Template& Template::operator=(Template&&) noexcept = default;

std::string Template::render(const nlohmann::ordered_json& context) const {
  std::string out;
  detail::Renderer r(impl_->limits, out);
  r.run(impl_->body, context);
  return out;
}

}  // namespace steermoe::jinja
