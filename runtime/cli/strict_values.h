// Strict reading of every option's value, for every subcommand at once. CLI11 converts
// integers with strtoull/strtoll (base 0): "-1" became 2^64 - 1 for a seed, a number past
// 64 bits was clamped to the largest, "010" read as 8; and floats with strtold, so "inf"
// and "nan" were a learning rate. An empty string was a path or a size. Checking by the
// option's type, once in main, covers each flag a subcommand adds, present and future.
#pragma once

#include <CLI/CLI.hpp>

namespace tandem::cli {

/// Adds to every option of `app` and its subcommands, by the type CLI11 records for it:
/// INT and UINT: decimal digits only (a leading '-' for INT), within the type's 64-bit range;
/// FLOAT: a finite decimal number; TEXT: not empty. Numbers are rewritten in plain decimal
/// for CLI11 to convert ("010" is 10). The message names the flag and the value:
/// "--seed: '-1' is not a whole number >= 0".
void require_strict_values(CLI::App& app);

}  // namespace tandem::cli
