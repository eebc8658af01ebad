// Option checks shared by every command (CLI11 validators with readable messages).
//
// harden_options(root) is applied once to every option of every subcommand, by type:
//   FLOAT options must be finite (NaN and inf are refused, not silently ignored);
//   UINT options (seeds, counts) must be plain non-negative decimal integers that fit in 64
//   bits ("-1" is refused instead of wrapping to 2^64 - 1).
// NonNegative / Positive replace CLI::NonNegativeNumber / PositiveNumber, whose message prints
// DBL_MAX with 300 digits.
#pragma once

#include <CLI/CLI.hpp>

namespace steermoe::cli {

extern const CLI::Validator NonNegative;
extern const CLI::Validator Positive;
// A number in (0, 1] (fractions where 0 would mean nothing, or "not given").
extern const CLI::Validator Fraction;
// An output file the command will write at its end: its folder must exist and the path must
// not be a folder, checked when the command line is read, not after hours of work. "-" (stdout)
// passes; the commands that take it say so.
extern const CLI::Validator WritablePath;

void harden_options(CLI::App& root);

}  // namespace steermoe::cli
