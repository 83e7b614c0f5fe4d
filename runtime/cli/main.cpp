// tandem: load, check and run layer-graph models on the CPU and GPUs.
#include <fmt/core.h>

#include <iostream>
#include <map>
#include <new>

#include "core/error.h"
#include "runtime/cli/commands.h"

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
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? 0 : 2;
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
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 1;
}
