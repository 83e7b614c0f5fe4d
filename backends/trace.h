// A timeline of what every device did, for ui.perfetto.dev or chrome://tracing: with
// `--trace FILE` (or TANDEM_TRACE=FILE in the environment), every task a device lane runs
// (kernels, copies, gradient additions, collectives), every layer the cpu runs on the
// calling thread, and what the host thread does between them (HostSpan) becomes one slice
// on its track, with its layer, shapes and bytes in the slice's arguments.
//
// The file is written as the run goes, as Chrome trace-event JSON ({"traceEvents": [...]}):
// slices are buffered and appended every 100 ms (and at exit), each time rewriting the
// closing brackets after them, so that a run stopped at any moment (Ctrl-C, a kill, a
// crash) leaves a whole JSON document of everything up to the last flush.
//
// A slice is named by the TraceLabel its task was submitted under ("layer 'fc1' (linear)
// backward", "fc1.weight upload"); TraceArgs adds what it worked on. Tasks that ran side
// by side (a task group, host_lanes.h) say so in their arguments.
#pragma once

#include <chrono>
#include <cstdio>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace tandem {

class DeviceSpanSink;

class Trace {
 public:
  using Clock = std::chrono::steady_clock;

  /// The process's trace, or null when none was started (--trace) nor is named by the
  /// environment (TANDEM_TRACE, or its older name TANDEM_SIM_TRACE).
  static Trace* active();
  /// Starts the process's trace into `path`, named `source` in messages ("--trace").
  /// UserError when the file cannot be written; a second start is refused the same way.
  static void start(const std::string& path, const std::string& source);
  /// Throws UserError when the environment names a trace file that cannot be written:
  /// called where devices are made, so that a bad path fails at once, not at exit.
  static void check_environment();

  /// Records that task `name` of track `track` ran from `start` to `stop`, beside
  /// `side_by_side - 1` others, with `args`, a JSON object's text ("" for none).
  /// Thread-safe.
  void add(const std::string& track, const std::string& name, Clock::time_point start, Clock::time_point stop,
           int side_by_side = 1, const std::string& args = {});

  /// Appends what is buffered to the file. False if it could not.
  bool flush();

  /// Where a backend that times its work on the device sends its spans (device_spans.h),
  /// or null when no trace is active. Lives as long as the process.
  static DeviceSpanSink* device_span_sink();

  Trace(const Trace&) = delete;
  Trace& operator=(const Trace&) = delete;

 private:
  Trace(std::string path, std::FILE* file);
  /// Appends `events` (JSON texts) before the closing brackets. Called under mutex_.
  bool append(const std::vector<std::string>& events);

  const std::string path_;
  std::FILE* file_;
  const Clock::time_point origin_;
  mutable std::mutex mutex_;
  std::vector<std::string> tracks_;   // track names, in order of first appearance
  std::vector<std::string> pending_;  // events not yet in the file
  Clock::time_point last_flush_;
  bool failed_ = false;               // said once
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

/// What the tasks this thread submits while it is in scope work on, as a JSON object's
/// text ({"layer": ..., "inputs": [[4, 12]], "bytes": 192}); build it only when a trace
/// is active (Trace::active()). Scopes nest; the innermost holds.
class TraceArgs {
 public:
  explicit TraceArgs(std::string args);
  ~TraceArgs();
  TraceArgs(const TraceArgs&) = delete;
  TraceArgs& operator=(const TraceArgs&) = delete;
  /// The arguments of a task submitted now by this thread ("" outside any).
  static const std::string& current();

 private:
  std::string args_;
  const std::string* outer_;
};

/// A span of the calling thread's time on track `track` ("host" by default), from
/// construction to destruction, with `args`; nothing when no trace is active.
class HostSpan {
 public:
  explicit HostSpan(const char* name, const char* track = "host");
  HostSpan(std::string name, const char* track, std::string args);
  ~HostSpan();
  HostSpan(const HostSpan&) = delete;
  HostSpan& operator=(const HostSpan&) = delete;

 private:
  std::string name_;
  const char* track_;
  std::string args_;
  Trace* trace_;
  Trace::Clock::time_point start_;
};

}  // namespace tandem
