// The trace of one GPU's streams (device_spans.h): while a trace is on, each piece of work
// enqueued on a stream is bracketed by a pair of CUDA events, and once it has run the pair
// is resolved, with cudaEventElapsedTime against one reference event whose host time is
// known, into a span on the host's clock on that stream's track ("cuda:0 compute").
//
// Events come from a pool: a pair goes back to it once its span is resolved, so a traced
// step makes no event after the first steps, and nothing is recorded with no trace on.
// The reference is recorded on the first traced stream and waited for once; its host time
// is taken right after the wait returns, so spans may sit late by that wake-up (a few
// microseconds), never early, and every span of a stream keeps its order.
//
// Thread-safety: every member may be called from any thread.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "backends/cuda/stream.h"
#include "backends/device_spans.h"

namespace tandem::cuda {

class StreamSpans {
 public:
  /// For the streams of CUDA device `device`.
  explicit StreamSpans(int device) : device_(device) {}
  StreamSpans(const StreamSpans&) = delete;
  StreamSpans& operator=(const StreamSpans&) = delete;

  /// Starts (a sink) or stops (null) recording. Spans not yet resolved stay pending.
  void trace_to(DeviceSpanSink* sink);

  /// A piece of work being enqueued: construct before, destroy after its enqueueing, on
  /// the submitting thread (whose trace label names it). Nothing when not tracing.
  class Scope {
   public:
    Scope(StreamSpans& spans, cudaStream_t stream, const std::string& track);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    StreamSpans& spans_;
    cudaStream_t stream_;
    const std::string& track_;
    std::optional<size_t> pair_;
  };

  /// Sends every span whose work has run to the sink, in order of enqueueing per stream;
  /// leaves the rest pending. No wait.
  void collect();

 private:
  struct Pending {
    size_t pair;
    std::string track, name, args;
  };
  /// Records the reference on `stream` and waits for it. With mutex_ held.
  void anchor(cudaStream_t stream);

  const int device_;
  std::mutex mutex_;
  DeviceSpanSink* sink_ = nullptr;
  std::optional<Event> reference_;
  Trace::Clock::time_point reference_host_;
  std::vector<std::pair<Event, Event>> pool_;  // start and stop, timing events
  std::vector<size_t> free_;                   // pairs of pool_ not in use
  std::deque<Pending> pending_;                // recorded, not yet resolved, oldest first
};

}  // namespace tandem::cuda
