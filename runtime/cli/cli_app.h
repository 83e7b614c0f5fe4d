// The tandem command line as a value: the app with every subcommand registered and every
// value read strictly, parsed apart from running, so that main() and the command-line
// fuzzer (tests/fuzz) share one parser.
#pragma once

#include <CLI/CLI.hpp>
#include <map>
#include <memory>
#include <optional>
#include <ostream>

#include "runtime/cli/commands.h"

namespace tandem::cli {

struct CliApp {
  std::unique_ptr<CLI::App> app;
  std::map<CLI::App*, Command> commands;  // by subcommand
  int threads = 0;                        // --threads, on every subcommand (0: not given)
};

/// check, run, train, devices and plan, with require_strict_values applied.
CliApp make_cli_app();

/// Parses `argv`. nullopt: a subcommand was parsed and is ready to run. Otherwise the exit
/// code: 0 after --help or --version (printed to `out`), 2 after an error (printed to
/// `err`, escaped: "error: ...").
std::optional<int> parse_command_line(CliApp& cli, int argc, const char* const* argv, std::ostream& out,
                                      std::ostream& err);

/// Runs the parsed subcommand; its exit code. A UserError (or host memory running out) is
/// printed to `err` and exits 2; any other exception, a bug, exits 1.
int run_parsed_command(CliApp& cli, std::ostream& err);

}  // namespace tandem::cli
