// Spans of work timed on a device rather than on the host: a CUDA stream's kernels and
// copies run after the host has enqueued them, so a host span around the enqueue measures
// the submission, not the GPU's work. A backend that can time its work on the device
// (CUDA events) records it while a trace is on and resolves it later, once the work has
// run, into spans on the host's clock, one track per lane ("cuda:0 compute").
//
// The runtime hands such a backend a DeviceSpanSink (Backend::trace_device_work) instead of
// the backend reaching for Trace::active() itself: the CUDA backend lives in its own module
// (libtandem_cuda.so) with its own copy of trace.cpp, whose process-wide trace and
// thread-local labels are not the runtime's. Calls through the sink reach the runtime's.
//
// Thread-safety: every member may be called from any thread.
#pragma once

#include <string>

#include "backends/trace.h"

namespace tandem {

class DeviceSpanSink {
 public:
  virtual ~DeviceSpanSink() = default;
  /// The name of work the calling thread submits now (TraceLabel::current()).
  virtual std::string label() const = 0;
  /// Its arguments, a JSON object's text or "" (TraceArgs::current()).
  virtual std::string args() const = 0;
  /// Adds a span of device work on `track`, from `start` to `stop` on the host's clock.
  virtual void add(const std::string& track, const std::string& name, Trace::Clock::time_point start,
                   Trace::Clock::time_point stop, const std::string& args) = 0;
};

/// The host time of a point `milliseconds` after `reference`, a device event whose host
/// time is known: how a span timed by device events (cudaEventElapsedTime against one
/// reference event) lands on the trace's clock.
inline Trace::Clock::time_point after_reference(Trace::Clock::time_point reference, double milliseconds) {
  return reference + std::chrono::duration_cast<Trace::Clock::duration>(
                         std::chrono::duration<double, std::milli>(milliseconds));
}

}  // namespace tandem
