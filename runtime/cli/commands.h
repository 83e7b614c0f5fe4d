// The `tandem` subcommands. Each registers its options on a CLI11 app and returns a
// function that runs it; errors a user can cause are thrown as UserError (exit code 2).
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <optional>
#include <string>

namespace tandem::cli {

using Command = std::function<int()>;

Command add_check_command(CLI::App& app);
Command add_run_command(CLI::App& app);
Command add_train_command(CLI::App& app);
Command add_evaluate_command(CLI::App& app);
Command add_predict_command(CLI::App& app);
Command add_devices_command(CLI::App& app);
Command add_plan_command(CLI::App& app);

/// When the first argument names no subcommand of `app` (and is no option), what to say:
/// "'rnu' is not a tandem command (did you mean 'run'?); the commands are ...".
std::optional<std::string> unknown_command(const CLI::App& app, int argc, const char* const* argv);

}  // namespace tandem::cli
