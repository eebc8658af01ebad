#include "eval/grid.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>

#include "common/error.hpp"
#include "policy/config.hpp"

namespace steermoe::eval {

namespace {

constexpr size_t kMaxPoints = 10000;

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (true) {
    const size_t at = s.find(sep, start);
    parts.push_back(s.substr(start, at == std::string_view::npos ? at : at - start));
    if (at == std::string_view::npos) break;
    start = at + 1;
  }
  return parts;
}

double parse_number(std::string_view text, std::string_view spec) {
  double v = 0.0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || ptr != text.data() + text.size() || !std::isfinite(v))
    fail("grid", std::string(spec), "expected a number in the range from..to:step, found '{}'",
         text);
  return v;
}

int decimals(std::string_view text) {
  const size_t dot = text.find('.');
  return dot == std::string_view::npos ? 0 : static_cast<int>(text.size() - dot - 1);
}

std::string format_fixed(double v, int digits) {
  std::string s = fmt::format("{:.{}f}", v, digits);
  if (s.find('.') != std::string::npos) {
    while (s.back() == '0') s.pop_back();
    if (s.back() == '.') s.pop_back();
  }
  if (s == "-0") s = "0";
  return s;
}

// Values of one SPEC.
std::vector<std::string> expand_values(std::string_view key, std::string_view spec) {
  const std::string where = fmt::format("{}={}", key, spec);
  if (spec.empty()) fail("grid", where, "expected a value, a list a|b or a range from..to:step");
  const size_t dots = spec.find("..");
  if (dots == std::string_view::npos) {
    std::vector<std::string> out;
    for (std::string_view v : split(spec, '|')) {
      if (v.empty()) fail("grid", where, "expected no empty value in the list");
      out.emplace_back(v);
    }
    return out;
  }
  const std::string_view from_text = spec.substr(0, dots);
  const std::string_view rest = spec.substr(dots + 2);
  const size_t colon = rest.find(':');
  if (colon == std::string_view::npos)
    fail("grid", where, "expected a range with a step: from..to:step");
  const std::string_view to_text = rest.substr(0, colon), step_text = rest.substr(colon + 1);
  const double from = parse_number(from_text, where), to = parse_number(to_text, where),
               step = parse_number(step_text, where);
  if (!(step > 0)) fail("grid", where, "expected a positive step, found {}", step_text);
  if (to < from) fail("grid", where, "expected from <= to, found {} > {}", from_text, to_text);
  const double span = (to - from) / step;
  if (span > static_cast<double>(kMaxPoints))
    fail("grid", where, "expected at most {} points", kMaxPoints);
  // Inclusive of `to` when it lies on the grid within rounding.
  const auto count = static_cast<size_t>(std::floor(span + 1e-9)) + 1;
  const int digits = std::max({decimals(from_text), decimals(to_text), decimals(step_text)});
  std::vector<std::string> out;
  for (size_t i = 0; i < count; ++i)
    out.push_back(format_fixed(from + static_cast<double>(i) * step, digits));
  return out;
}

void expand_one(std::string_view grid, std::vector<std::string>& out) {
  const std::string where(grid);
  const size_t colon = grid.find(':');
  const std::string_view name = grid.substr(0, colon);
  if (name.empty()) fail("grid", where, "expected name[:key=SPEC,...], found an empty name");
  std::vector<std::pair<std::string, std::vector<std::string>>> axes;
  if (colon != std::string_view::npos) {
    // Split on ',' but not inside a range's "from..to:step" (which has no ',').
    for (std::string_view item : split(grid.substr(colon + 1), ',')) {
      const size_t eq = item.find('=');
      if (eq == std::string_view::npos || eq == 0)
        fail("grid", std::string(item), "expected key=SPEC");
      const std::string_view key = item.substr(0, eq);
      for (const auto& axis : axes)
        if (axis.first == key) fail("grid", std::string(key), "expected each key once");
      axes.emplace_back(std::string(key), expand_values(key, item.substr(eq + 1)));
    }
  }
  size_t total = 1;
  for (const auto& axis : axes) {
    total *= axis.second.size();
    if (total > kMaxPoints) fail("grid", where, "expected at most {} points", kMaxPoints);
  }
  std::vector<size_t> index(axes.size(), 0);
  for (size_t p = 0; p < total; ++p) {
    std::string policy(name);
    for (size_t a = 0; a < axes.size(); ++a)
      policy += fmt::format("{}{}={}", a == 0 ? ":" : ",", axes[a].first, axes[a].second[index[a]]);
    policy::parse_policy(policy);  // throws with the policy parser's message
    out.push_back(std::move(policy));
    for (size_t a = axes.size(); a-- > 0;) {  // last key fastest
      if (++index[a] < axes[a].second.size()) break;
      index[a] = 0;
    }
  }
}

}  // namespace

std::vector<std::string> expand_grid(std::string_view grid) {
  std::vector<std::string> out;
  for (std::string_view part : split(grid, ';')) {
    if (part.empty()) fail("grid", std::string(grid), "expected no empty grid between ';'");
    expand_one(part, out);
    if (out.size() > kMaxPoints)
      fail("grid", std::string(grid), "expected at most {} points", kMaxPoints);
  }
  return out;
}

}  // namespace steermoe::eval
