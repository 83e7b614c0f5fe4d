// A simulated GPU (DESIGN.md "Simulated GPUs"): a device cuda:N with its own memory pool,
// its own in-order execution queue on a worker thread, events to order queues against each
// other, and real copies in and out. Kernels are the CPU's; they run as queue tasks.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "core/device.h"
#include "core/storage.h"

namespace tandem {

/// A point in a queue (after cudaEvent_t). It completes when every task submitted to its
/// queue before it has run. Cheap to copy; copies share the same point. A default-constructed
/// Event is already complete. Thread-safe.
class Event {
 public:
  Event() = default;
  /// Whether the point has been reached.
  bool done() const;
  /// Blocks the calling thread until the point is reached, then rethrows the error of a task
  /// that failed on its queue before it (or on a queue that queue waited on), if any.
  void wait() const;

 private:
  friend class SimGpu;
  struct State {
    std::mutex mutex;
    std::condition_variable reached;
    bool done = false;
    std::exception_ptr error;
  };
  std::shared_ptr<State> state_;
};

/// A byte position in a storage; the copy keeps the storage alive until it has run.
struct BufferRef {
  std::shared_ptr<Storage> storage;
  size_t offset = 0;
};

/// What one device's queue did, for the report. Bytes and copies "in" arrived on this
/// device (from the host or a peer); "out" left it.
struct QueueStats {
  size_t bytes_in = 0;
  size_t bytes_out = 0;
  size_t copies_in = 0;
  size_t copies_out = 0;
  size_t tasks_run = 0;       // tasks and copies that ran (not waits, not skipped ones)
  double busy_seconds = 0.0;  // sum of the run times of those tasks
};

/// One simulated GPU. Owns its pool and its worker thread. Every member function may be
/// called from any thread. The destructor runs what is still queued, then joins the worker;
/// an error still unreported then is dropped (a destructor cannot throw: synchronize() first).
///
/// Errors: an exception thrown by a task is caught on the worker and kept. The tasks after it
/// on this queue are skipped (their inputs may be garbage), but events still complete, so no
/// other queue hangs. The error is rethrown on the host by the next synchronize() (which then
/// clears it, so the queue can be used again) and by wait() on any event recorded after it;
/// a queue that waits on such an event takes the error on as its own.
class SimGpu {
 public:
  /// cuda:`index`, with a pool of `capacity_bytes` (> 0).
  SimGpu(int index, size_t capacity_bytes);
  ~SimGpu();
  SimGpu(const SimGpu&) = delete;
  SimGpu& operator=(const SimGpu&) = delete;

  Device device() const { return device_; }
  /// This device's memory pool: allocations count against its capacity only.
  PoolAllocator& allocator() { return allocator_; }
  const PoolAllocator& allocator() const { return allocator_; }

  /// Queues `task` behind everything submitted before; returns at once.
  void submit(std::function<void()> task);
  /// An event that completes once everything submitted so far has run.
  Event record();
  /// Makes this queue wait for `event` (of any device) before it runs what is submitted
  /// after; the host does not wait.
  void submit_wait(const Event& event);
  /// Blocks the host until `event` is reached; rethrows its error (see the class comment).
  void wait(const Event& event) { event.wait(); }
  /// Blocks the host until everything submitted has run; rethrows and clears the error of a
  /// failed task.
  void synchronize();

  /// Queues a copy of `bytes` bytes from host memory `src` to `dst` on this device.
  void copy_from_host(BufferRef dst, BufferRef src, size_t bytes);
  /// Queues a copy of `bytes` bytes from `src` on this device to host memory `dst`.
  void copy_to_host(BufferRef dst, BufferRef src, size_t bytes);
  /// Queues, on this (the source) queue, a copy from `src` on this device to `dst` on
  /// `dst_gpu`. Before `dst_gpu` reads it, its queue must wait on an event recorded here after.
  void copy_peer(SimGpu& dst_gpu, BufferRef dst, BufferRef src, size_t bytes);

  /// Counts so far (tasks still queued are not in them yet).
  QueueStats stats() const;

 private:
  enum class ItemKind { task, record, wait };
  struct Item {
    ItemKind kind;
    std::function<void()> task;                 // kind task
    std::shared_ptr<Event::State> event;        // kind record or wait
  };
  void enqueue(Item item);
  void run_worker();
  void run_task(const std::function<void()>& task);
  void check_copy(const BufferRef& dst, Device dst_device, const BufferRef& src, Device src_device, size_t bytes) const;

  const Device device_;
  PoolAllocator allocator_;

  mutable std::mutex mutex_;
  std::condition_variable work_ready_;
  std::condition_variable idle_;
  std::deque<Item> queue_;
  size_t unfinished_ = 0;  // queued or running
  bool stopping_ = false;
  std::exception_ptr error_;

  std::atomic<size_t> bytes_in_{0}, bytes_out_{0}, copies_in_{0}, copies_out_{0}, tasks_run_{0};
  std::atomic<int64_t> busy_ns_{0};

  std::thread worker_;  // last: starts once everything above exists
};

}  // namespace tandem
