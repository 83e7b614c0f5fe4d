// Stream and Event: RAII owners of a cudaStream_t and a cudaEvent_t, each bound to the
// device it was made on. Work is ordered across streams by events (Stream::wait), never
// by making the host wait without need (docs/architecture.md, "Lanes and events").
//
// Thread-safety: as the CUDA runtime's: any thread may enqueue on a stream; one object
// is not moved or destroyed while another thread uses it.
#pragma once

#include <cuda_runtime_api.h>

namespace tandem::cuda {

/// A marker in a stream. Made without timing (cheaper to record and wait on) unless asked.
class Event {
 public:
  explicit Event(int device, bool timing = false);
  ~Event();
  Event(Event&& other) noexcept;
  Event& operator=(Event&& other) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  /// Marks the point of `stream` reached by the work queued on it so far.
  void record(cudaStream_t stream);
  /// Whether the work before the last record() has run (true when never recorded).
  bool done() const;
  /// Blocks the host until the work before the last record() has run.
  void synchronize() const;
  /// Milliseconds from `start` to this event; both made with timing and completed.
  float milliseconds_since(const Event& start) const;
  cudaEvent_t get() const { return event_; }
  int device() const { return device_; }

 private:
  int device_ = 0;
  cudaEvent_t event_ = nullptr;
};

/// A non-blocking stream (it does not synchronise with the legacy default stream).
class Stream {
 public:
  /// `priority`: 0 is the default; lower numbers run first (cudaDeviceGetStreamPriorityRange).
  explicit Stream(int device, int priority = 0);
  ~Stream();
  Stream(Stream&& other) noexcept;
  Stream& operator=(Stream&& other) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  cudaStream_t get() const { return stream_; }
  int device() const { return device_; }
  /// Work queued on this stream after this call waits for `event` (no host wait).
  void wait(const Event& event);
  /// Work queued on this stream after this call waits for everything queued on `other` so far.
  void wait(const Stream& other);
  /// A new event recorded at the current end of this stream.
  Event record() const;
  /// Blocks the host until everything queued has run; throws the first asynchronous error.
  void synchronize() const;

 private:
  int device_ = 0;
  cudaStream_t stream_ = nullptr;
};

}  // namespace tandem::cuda
