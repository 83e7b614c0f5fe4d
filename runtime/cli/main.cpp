// tandem: load, check and run layer-graph models on the CPU and GPUs.
#include <iostream>

#include "runtime/cli/cli_app.h"

int main(int argc, char** argv) {
  tandem::cli::CliApp cli = tandem::cli::make_cli_app();
  if (std::optional<int> code = tandem::cli::parse_command_line(cli, argc, argv, std::cout, std::cerr)) return *code;
  return tandem::cli::run_parsed_command(cli, std::cerr);
}
