// --trace FILE, shared by `tandem run` and `train`: a timeline of every device's work
// (backends/trace.h), written as the run goes. Under mpirun each rank writes its own file:
// rank 0 FILE, rank r FILE with ".rank<r>" before its extension.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace tandem::cli {

/// Registers --trace.
void add_trace_option(CLI::App& app, std::string& path);
/// Starts the trace --trace asked for (nothing for ""), before any work: UserError naming
/// the flag and the file when it cannot be written. `rank` of `ranks` names the file.
void start_trace(const std::string& path, int rank = 0, int ranks = 1);
/// The file rank `rank` writes for --trace `path`.
std::string trace_path_of_rank(const std::string& path, int rank);

}  // namespace tandem::cli
