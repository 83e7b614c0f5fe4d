// Lanes and events: how work on a device is ordered, the same for every backend.
//
// A lane is one device's in-order line of work (a CUDA stream; a simulated GPU's queue;
// the queue the cpu's kernels run on when a model is placed). An event is a point in a
// lane; another lane, of any device, can wait for it without the host waiting. These are
// the only ordering tools the runtime has: it never learns whether a lane is a stream or a
// thread.
//
// The contract of submit(), one for both kinds of lane:
//   - A host lane (the cpu, a simulated GPU) queues `work` and runs it later, on a thread
//     of its backend, after everything submitted before it; `work` itself computes.
//   - A stream lane (CUDA) calls `work` at once, on the submitting thread, with the lane's
//     device current; `work` enqueues device work on the lane's stream (a kernel made by
//     that device's backend does exactly that) and returns. The device work is what is
//     ordered.
// So the caller writes `work` as if it ran later, somewhere else:
//   - it captures by value every tensor it touches (on a host lane that keeps their
//     memory alive until it has run; a stream lane's backend keeps blocks that another
//     lane uses from being reused too early, as torch's record_stream);
//   - it reads no host value that the caller changes after submit();
//   - it never waits for another lane itself: the lane waits (wait()) before it.
// What `work` leaves in host memory (a loss's value) may be read once an event recorded
// after it is reached. An exception from `work` comes out of submit() (a stream lane) or
// out of the next synchronize(), or wait() of a later event (a host lane); later work on
// that lane may then be skipped, and the caller drains every lane and rethrows.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace tandem {

/// A point in one lane's order of work. It is reached once everything submitted to its
/// lane before it has run. Cheap to copy; copies share the point. A default-constructed
/// event is already reached. Thread-safe.
class DeviceEvent {
 public:
  /// A backend's own event.
  class Impl {
   public:
    virtual ~Impl() = default;
    virtual bool done() const = 0;
    /// Blocks the calling thread until reached; rethrows the error of work that failed on
    /// its lane before it (or on a lane that lane waited for), if any.
    virtual void wait() const = 0;
  };

  DeviceEvent() = default;
  explicit DeviceEvent(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}

  bool done() const { return !impl_ || impl_->done(); }
  void wait() const {
    if (impl_) impl_->wait();
  }
  /// The backend's event, so that a lane of the same backend can wait for it its own way;
  /// null when already reached at creation.
  const std::shared_ptr<const Impl>& impl() const { return impl_; }

 private:
  std::shared_ptr<const Impl> impl_;
};

/// Work on lanes of different devices that had best run at the same time: the replicas of
/// one layer of a data_parallel block, `size` of them, each submitted with the same group
/// to its own lane. A hint: a stream lane ignores it (real GPUs run at once anyway); host
/// lanes use it to run the members side by side on the host's cores.
class TaskGroup {
 public:
  explicit TaskGroup(int size) : size_(size) {}
  int size() const { return size_; }

  /// Bookkeeping of the host lanes' scheduler, guarded by it (backends/host_lanes.h).
  struct SchedulerState {
    int64_t first_ready_ns = 0;  // when a member was first found ready (0: not yet)
    int taken = 0;               // members taken to run
  };
  SchedulerState scheduler;

 private:
  const int size_;
};

/// One device's in-order line of work. See the contract above. Every member may be called
/// from any thread.
class Lane {
 public:
  virtual ~Lane() = default;
  /// For errors and traces: "cuda:0", "cuda:0 copies".
  virtual const std::string& name() const = 0;
  /// Queues `work` behind everything submitted before (see above). With `side_by_side`,
  /// it belongs to that group (a hint).
  virtual void submit(std::function<void()> work, std::shared_ptr<TaskGroup> side_by_side = nullptr) = 0;
  /// An event reached once everything submitted so far has run.
  virtual DeviceEvent record() = 0;
  /// Work submitted after this call waits for `event`, of any lane of any backend; the
  /// calling thread does not wait, unless the event is another backend's that this lane
  /// cannot wait for on its own (then the fallback is the backend's to state).
  virtual void wait(const DeviceEvent& event) = 0;
  /// Blocks the calling thread until everything submitted has run; rethrows (and clears)
  /// the error of work that failed.
  virtual void synchronize() = 0;
};

}  // namespace tandem
