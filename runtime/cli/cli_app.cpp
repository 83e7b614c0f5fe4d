#include "runtime/cli/cli_app.h"

#include <new>
#include <string>

#include "core/error.h"
#include "core/printable_text.h"
#include "runtime/cli/strict_values.h"
#include "runtime/threads.h"

namespace tandem::cli {

CliApp make_cli_app() {
  CliApp cli;
  cli.app = std::make_unique<CLI::App>(
      "Tandem: run one model across a CPU and GPUs, declared as a layer graph in YAML.", "tandem");
  CLI::App& app = *cli.app;
  app.require_subcommand(1);
  app.set_version_flag("--version", "tandem 0.1.0");
  auto add = [&](auto adder) {
    size_t before = app.get_subcommands({}).size();
    Command command = adder(app);
    CLI::App* sub = app.get_subcommands({}).at(before);
    sub->add_option("--threads", cli.threads,
                    "threads the cpu computes with (default: the cores this process may run on, or OMP_NUM_THREADS)")
        ->check(CLI::Range(1, 1024));
    cli.commands[sub] = std::move(command);
  };
  add(add_check_command);
  add(add_run_command);
  add(add_train_command);
  add(add_evaluate_command);
  add(add_predict_command);
  add(add_devices_command);
  add(add_plan_command);
  require_strict_values(app);
  return cli;
}

std::optional<int> parse_command_line(CliApp& cli, int argc, const char* const* argv, std::ostream& out,
                                      std::ostream& err) {
  if (std::optional<std::string> message = unknown_command(*cli.app, argc, argv)) {
    err << "error: " << printable_text(*message) << "\n";
    return 2;
  }
  try {
    cli.app->parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return cli.app->exit(e, out, err);  // --help, --version
    // CLI11 quotes what it was given: escaped, as every message of ours is
    err << "error: " << printable_text(e.what()) << "\nRun with --help for more information.\n";
    return 2;
  }
  return std::nullopt;
}

int run_parsed_command(CliApp& cli, std::ostream& err) {
  try {
    if (cli.threads > 0) set_threads(cli.threads, "--threads");  // before any device makes its kernels
    for (auto& [sub, command] : cli.commands)
      if (sub->parsed()) return command();
  } catch (const UserError& e) {
    err << "error: " << e.what() << "\n";
    return 2;
  } catch (const std::bad_alloc&) {
    err << "error: out of memory on the host; try a smaller batch or model\n";
    return 2;
  } catch (const std::exception& e) {
    err << "error: " << printable_text(e.what()) << "\n";
    return 1;
  }
  return 1;
}

}  // namespace tandem::cli
