// tandem: load, check and run layer-graph models on the CPU and GPUs.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "runtime/cli/cli_app.h"
#include "runtime/threads.h"

int main(int argc, char** argv) {
  // Note [waiting threads] (runtime/threads.h): OpenMP's threads spin briefly, then sleep,
  // unless the environment says otherwise. libgomp read the environment when it loaded,
  // before main(): set the spin count and start again (the same process, the same pid,
  // under mpirun too). Should the exec fail, the run goes on with OpenMP's default.
  if (!std::getenv("OMP_WAIT_POLICY") && !std::getenv("GOMP_SPINCOUNT")) {
    setenv("GOMP_SPINCOUNT", tandem::kSpinsBeforeSleeping, 1);
    execv("/proc/self/exe", argv);
  }
  // A log a file or a pipe takes keeps up with the run, line by line, as a terminal does: a
  // full buffer would hold minutes of epochs back, and lose them to a kill.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  tandem::cli::CliApp cli = tandem::cli::make_cli_app();
  if (std::optional<int> code = tandem::cli::parse_command_line(cli, argc, argv, std::cout, std::cerr)) return *code;
  return tandem::cli::run_parsed_command(cli, std::cerr);
}
