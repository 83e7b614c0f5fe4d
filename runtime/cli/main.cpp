// tandem: load, check and run layer-graph models on the CPU and GPUs.
#include <fmt/core.h>

#include <iostream>
#include <map>
#include <new>
#include <optional>
#include <string>

#include "core/error.h"
#include "core/printable_text.h"
#include "runtime/cli/commands.h"
#include "runtime/cli/strict_values.h"

int main(int argc, char** argv) {
  CLI::App app{"Tandem: run one model across a CPU and GPUs, declared as a layer graph in YAML.", "tandem"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "tandem 0.1.0");
  std::map<CLI::App*, tandem::cli::Command> commands;
  auto add = [&](auto adder) {
    size_t before = app.get_subcommands({}).size();
    tandem::cli::Command command = adder(app);
    commands[app.get_subcommands({}).at(before)] = std::move(command);
  };
  add(tandem::cli::add_check_command);
  add(tandem::cli::add_run_command);
  add(tandem::cli::add_train_command);
  add(tandem::cli::add_devices_command);
  add(tandem::cli::add_plan_command);
  tandem::cli::require_strict_values(app);
  if (std::optional<std::string> message = tandem::cli::unknown_command(app, argc, argv)) {
    std::cerr << "error: " << tandem::printable_text(*message) << "\n";
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    // CLI11 quotes what it was given: escaped, as every message of ours is
    std::cerr << "error: " << tandem::printable_text(e.what()) << "\nRun with --help for more information.\n";
    return 2;
  }
  try {
    for (auto& [sub, command] : commands)
      if (sub->parsed()) return command();
  } catch (const tandem::UserError& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  } catch (const std::bad_alloc&) {
    std::cerr << "error: out of memory on the host; try a smaller batch or model\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "error: " << tandem::printable_text(e.what()) << "\n";
    return 1;
  }
  return 1;
}
