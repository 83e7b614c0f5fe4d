// A simulated GPU (DESIGN.md "Simulated GPUs"): a device cuda:N with its own memory pool,
// a compute queue for its kernels and a copy queue for transfers (as a GPU's stream and
// copy engine), events to order queues against each other, and real copies in and out.
// Kernels are the CPU's; they run as tasks on the shared SimEngine (sim_engine.h).
#pragma once

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>

#include "backends/sim/sim_engine.h"
#include "core/device.h"
#include "core/storage.h"

namespace tandem {

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
  double busy_seconds = 0.0;  // sum of the run times of the compute queue's tasks
};

/// One simulated GPU. Every member function may be called from any thread. Destroying it
/// runs what is still queued first (see SimQueue).
class SimGpu {
 public:
  /// Which of its queues a copy goes on: `compute`, in order with the kernels (simplest), or
  /// `copy`, the copy engine, overlapping the kernels (order it with events).
  enum class Stream { compute, copy };

  /// Where a copy of an activation between layers goes: the compute queue, where a large
  /// copy uses every core (the compute thread's OpenMP team). The copy engine overlaps
  /// kernels, but a simulated GPU's kernels already use every core, so there it only takes
  /// one from them; measured on 2 cores, a model split cpu | cuda:0 | cuda:1 at batch 256
  /// (1 MiB activations) ran 7% slower than on one device with its copies on the copy
  /// engine, 1% with them on the compute queue. The copy engine stays for what must not
  /// wait for the kernels: gradients going to the host during backward.
  static constexpr Stream activation_stream = Stream::compute;

  /// cuda:`index`, with a pool of `capacity_bytes` (> 0).
  SimGpu(int index, size_t capacity_bytes, SimEngine& engine = SimEngine::shared());
  SimGpu(const SimGpu&) = delete;
  SimGpu& operator=(const SimGpu&) = delete;

  Device device() const { return device_; }
  /// This device's memory pool: allocations count against its capacity only.
  PoolAllocator& allocator() { return allocator_; }
  const PoolAllocator& allocator() const { return allocator_; }
  SimQueue& queue() { return compute_; }
  SimQueue& copy_queue() { return copies_; }
  SimQueue& queue(Stream stream) { return stream == Stream::compute ? compute_ : copies_; }

  /// The compute queue's submit, record, submit_wait (see SimQueue).
  void submit(std::function<void()> task) { compute_.submit(std::move(task)); }
  Event record() { return compute_.record(); }
  void submit_wait(const Event& event) { compute_.submit_wait(event); }
  /// Blocks the host until `event` is reached; rethrows its error.
  void wait(const Event& event) { event.wait(); }
  /// Blocks the host until both queues have run everything; rethrows and clears the error
  /// of a failed task.
  void synchronize();

  /// Queues a copy of `bytes` bytes from host memory `src` to `dst` on this device; with a
  /// `group`, beside the group's other tasks (the same weight going up to every replica).
  void copy_from_host(BufferRef dst, BufferRef src, size_t bytes, Stream stream = Stream::compute,
                      std::shared_ptr<TaskGroup> group = nullptr);
  /// Queues a copy of `bytes` bytes from `src` on this device to host memory `dst`.
  void copy_to_host(BufferRef dst, BufferRef src, size_t bytes, Stream stream = Stream::compute);
  /// Queues, on this (the source) device's `stream`, a copy from `src` on this device to
  /// `dst` on `dst_gpu`. Before `dst_gpu` reads it, its queue must wait on an event recorded
  /// on that stream after.
  void copy_peer(SimGpu& dst_gpu, BufferRef dst, BufferRef src, size_t bytes, Stream stream = Stream::compute);

  /// Counts so far (items still queued are not in them yet). Busy time is the compute
  /// queue's: the copy engine works beside it.
  QueueStats stats() const;

 private:
  void check_copy(const BufferRef& dst, Device dst_device, const BufferRef& src, Device src_device, size_t bytes) const;

  const Device device_;
  PoolAllocator allocator_;
  std::atomic<size_t> bytes_in_{0}, bytes_out_{0}, copies_in_{0}, copies_out_{0};
  // last: destroyed (drained) first, while the pool and counters their tasks touch exist
  SimQueue compute_;
  SimQueue copies_;
};

}  // namespace tandem
