// Errors and always-on internal checks shared by every part of steermoe.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace steermoe {

// A user-facing failure (bad file, bad flag, missing tensor, I/O error). The message names the
// file (or input), the field and what was expected; the CLI prints it and exits non-zero.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Builds the conventional message "<where>: <field>: <what>" and throws it.
template <typename... Args>
[[noreturn]] void fail(const std::string& where, const std::string& field,
                       fmt::format_string<Args...> what, Args&&... args) {
  throw Error(fmt::format("{}: {}: {}", where, field, fmt::format(what, std::forward<Args>(args)...)));
}

[[noreturn]] void assertion_failed(const char* expr, const char* file, int line, const char* msg);

}  // namespace steermoe

// Internal invariant, checked in every build type (never compiled out): a violation is a bug in
// steermoe, not bad input, so it aborts with file and line.
#define SM_ASSERT(expr)                                                        \
  do {                                                                         \
    if (!(expr)) ::steermoe::assertion_failed(#expr, __FILE__, __LINE__, ""); \
  } while (0)
#define SM_ASSERT_MSG(expr, msg)                                                \
  do {                                                                          \
    if (!(expr)) ::steermoe::assertion_failed(#expr, __FILE__, __LINE__, msg); \
  } while (0)
