// A timeline of what the simulated devices ran, for chrome://tracing or ui.perfetto.dev:
// with TANDEM_SIM_TRACE=FILE in the environment, every task a simulated device's queue
// runs (kernels, copies, gradient additions) becomes one slice on that queue's track,
// written to FILE as Chrome trace-event JSON when the process exits. Slices of tasks that
// ran side by side (a task group, sim_engine.h) say so in their arguments.
#pragma once

#include <chrono>
#include <mutex>
#include <string>
#include <vector>

namespace tandem {

class SimTrace {
 public:
  /// The process's trace, or null when TANDEM_SIM_TRACE is not set.
  static SimTrace* active();
  /// Throws UserError when TANDEM_SIM_TRACE names a file that cannot be written; called
  /// where simulated GPUs are made, so that a bad path fails at once, not at exit.
  static void check_environment();

  /// Records that a task of queue `queue` ran from `start` to `stop`, beside
  /// `side_by_side - 1` others. Thread-safe.
  void add(const std::string& queue, std::chrono::steady_clock::time_point start,
           std::chrono::steady_clock::time_point stop, int side_by_side);

  /// Writes the slices so far to the file (done at exit). False if it could not.
  bool write() const;

  explicit SimTrace(std::string path) : path_(std::move(path)) {}
  SimTrace(const SimTrace&) = delete;
  SimTrace& operator=(const SimTrace&) = delete;

 private:
  struct Slice {
    int track;
    std::chrono::steady_clock::time_point start, stop;
    int side_by_side;
  };
  const std::string path_;
  mutable std::mutex mutex_;
  std::vector<std::string> tracks_;  // queue names, in order of first appearance
  std::vector<Slice> slices_;
};

}  // namespace tandem
