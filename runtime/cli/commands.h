// The `tandem` subcommands. Each registers its options on a CLI11 app and returns a
// function that runs it; errors a user can cause are thrown as UserError (exit code 2).
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

namespace tandem::cli {

using Command = std::function<int()>;

Command add_check_command(CLI::App& app);
Command add_run_command(CLI::App& app);
Command add_train_command(CLI::App& app);
Command add_devices_command(CLI::App& app);
Command add_plan_command(CLI::App& app);

}  // namespace tandem::cli
