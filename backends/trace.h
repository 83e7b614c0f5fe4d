// A timeline of what the simulated devices ran, for chrome://tracing or ui.perfetto.dev:
// with TANDEM_SIM_TRACE=FILE in the environment, every task a simulated device's queue
// runs (kernels, copies, gradient additions) becomes one slice on that queue's track,
// written to FILE as Chrome trace-event JSON when the process exits. Slices of tasks that
// ran side by side (a task group, host_lanes.h) say so in their arguments. A slice is
// named by the TraceLabel its task was submitted under ("layer 'fc1' (linear) backward",
// "upload fc1.weight"), and a "host" track shows what the host thread did meanwhile
// (HostSpan: the optimizer's step, waits for the devices).
#pragma once

#include <chrono>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace tandem {

class SimTrace {
 public:
  /// The process's trace, or null when TANDEM_SIM_TRACE is not set.
  static SimTrace* active();
  /// Throws UserError when TANDEM_SIM_TRACE names a file that cannot be written; called
  /// where simulated GPUs are made, so that a bad path fails at once, not at exit.
  static void check_environment();

  /// Records that task `name` of queue `queue` ran from `start` to `stop`, beside
  /// `side_by_side - 1` others. Thread-safe.
  void add(const std::string& queue, const std::string& name, std::chrono::steady_clock::time_point start,
           std::chrono::steady_clock::time_point stop, int side_by_side);

  /// Writes the slices so far to the file (done at exit). False if it could not.
  bool write() const;

  explicit SimTrace(std::string path) : path_(std::move(path)) {}
  SimTrace(const SimTrace&) = delete;
  SimTrace& operator=(const SimTrace&) = delete;

 private:
  struct Slice {
    int track;
    std::string name;
    std::chrono::steady_clock::time_point start, stop;
    int side_by_side;
  };
  const std::string path_;
  mutable std::mutex mutex_;
  std::vector<std::string> tracks_;  // queue names, in order of first appearance
  std::vector<Slice> slices_;
};

/// Names the tasks this thread submits while it is in scope, for the trace: `what` and
/// `phase` joined ("layer 'fc1' (linear)" "backward"). Free when no trace is active: it
/// keeps two views, and the name is built only when a task is submitted under a trace.
/// Both must outlive the scope (a member, a key, a literal). Scopes nest; the innermost names.
class TraceLabel {
 public:
  explicit TraceLabel(std::string_view what, std::string_view phase = {});
  ~TraceLabel();
  TraceLabel(const TraceLabel&) = delete;
  TraceLabel& operator=(const TraceLabel&) = delete;
  /// The name of a task submitted now by this thread ("task" outside any label).
  static std::string current();

 private:
  std::string_view outer_what_, outer_phase_;
};

/// A span of the host thread's time on the trace's "host" track, from construction to
/// destruction; nothing when no trace is active.
class HostSpan {
 public:
  explicit HostSpan(const char* name);
  ~HostSpan();
  HostSpan(const HostSpan&) = delete;
  HostSpan& operator=(const HostSpan&) = delete;

 private:
  const char* name_;
  SimTrace* trace_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace tandem
