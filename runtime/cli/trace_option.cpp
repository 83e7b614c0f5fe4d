#include "runtime/cli/trace_option.h"

#include <filesystem>

#include "backends/trace.h"

namespace tandem::cli {

void add_trace_option(CLI::App& app, std::string& path) {
  app.add_option("--trace", path,
                 "write a timeline of every device's kernels, copies and collectives to this file as the run goes "
                 "(Chrome trace JSON: open it in ui.perfetto.dev)");
}

std::string trace_path_of_rank(const std::string& path, int rank) {
  if (rank == 0) return path;
  const std::filesystem::path p(path);
  return (p.parent_path() / (p.stem().string() + ".rank" + std::to_string(rank) + p.extension().string())).string();
}

void start_trace(const std::string& path, int rank, int ranks) {
  if (path.empty()) return;
  Trace::start(ranks > 1 ? trace_path_of_rank(path, rank) : path, "--trace");
}

}  // namespace tandem::cli
