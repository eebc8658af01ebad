#include "cli/validators.hpp"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "common/progress.hpp"

namespace steermoe::cli {
namespace {

// Parses a whole string as a double; false if it is not a number.
bool parse_double(const std::string& text, double& value) {
  if (text.empty()) return false;
  char* end = nullptr;
  errno = 0;
  value = std::strtod(text.c_str(), &end);
  return end != text.c_str() && *end == '\0';
}

CLI::Validator number_at_least(double lo, bool strict, const char* name) {
  return CLI::Validator(
      [lo, strict](std::string& input) -> std::string {
        double v = 0;
        if (!parse_double(input, v)) return "expected a number, found '" + input + "'";
        if (!std::isfinite(v)) return "expected a finite number, found '" + input + "'";
        if (strict ? !(v > lo) : !(v >= lo)) {
          return std::string("expected a number ") + (strict ? "> " : ">= ") +
                 CLI::detail::to_string(lo) + ", found " + input;
        }
        return {};
      },
      strict ? "> 0" : ">= 0", name);
}

const CLI::Validator kFinite(
    [](std::string& input) -> std::string {
      double v = 0;
      if (parse_double(input, v) && !std::isfinite(v)) {
        return "expected a finite number, found '" + input + "'";
      }
      return {};  // other parse errors are CLI11's (ConversionError)
    },
    "", "FINITE");

const CLI::Validator kUnsigned64(
    [](std::string& input) -> std::string {
      if (input.empty() || input.find_first_not_of("0123456789") != std::string::npos) {
        return "expected a non-negative decimal integer, found '" + input + "'";
      }
      errno = 0;
      (void)std::strtoull(input.c_str(), nullptr, 10);
      if (errno == ERANGE) {
        return "expected an integer in [0, 18446744073709551615], found " + input;
      }
      return {};
    },
    "", "UINT64");

void harden(CLI::App& app) {
  for (CLI::Option* option : app.get_options()) {
    if (option->get_expected_min() == 0) continue;  // flags
    const std::string type = option->get_type_name();
    if (type == "FLOAT" || type.rfind("FLOAT", 0) == 0) option->check(kFinite);
    if (type == "UINT" || type.rfind("UINT", 0) == 0) option->check(kUnsigned64);
  }
  for (CLI::App* sub : app.get_subcommands({})) {
    harden(*sub);
    if (sub->get_option_no_throw("--quiet") == nullptr) {
      sub->add_flag_callback(
          "-q,--quiet", [] { set_progress_quiet(true); },
          "No progress lines on stderr (also STEERMOE_QUIET=1)");
    }
  }
}

}  // namespace

const CLI::Validator NonNegative = number_at_least(0.0, false, "NONNEGATIVE");
const CLI::Validator Positive = number_at_least(0.0, true, "POSITIVE");
const CLI::Validator WritablePath(
    [](std::string& input) -> std::string {
      if (input == "-") return {};
      const std::filesystem::path path(input);
      std::error_code ec;
      if (std::filesystem::is_directory(path, ec))
        return "expected a file to write, found the folder " + input;
      const std::filesystem::path parent = path.parent_path();
      if (!parent.empty() && !std::filesystem::is_directory(parent, ec))
        return "expected an existing folder for " + input + ": " + parent.string() +
               " does not exist";
      return {};
    },
    "", "OUTPUT");

const CLI::Validator Fraction(
    [](std::string& input) -> std::string {
      double v = 0;
      if (!parse_double(input, v)) return "expected a number, found '" + input + "'";
      if (!(v > 0.0 && v <= 1.0)) return "expected a number in (0, 1], found " + input;
      return {};
    },
    "FLOAT in (0 - 1]", "FRACTION");

void harden_options(CLI::App& root) {
  harden(root);
}

}  // namespace steermoe::cli
