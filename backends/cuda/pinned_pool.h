// PinnedPool: page-locked host buffers for staging copies between pageable host memory
// and a GPU. A copy from pageable memory cannot be asynchronous (the driver stages it
// through its own small pinned buffer, on the host's time); copying first into a pinned
// buffer, and from there with cudaMemcpyAsync, overlaps the host's memcpy of one chunk
// with the DMA of the previous (copies.h). cudaHostAlloc is slow (it maps and locks
// pages), so buffers are cached by size class (size_class.h) and reused.
//
// A buffer given back with release_after(stream) is reused only once the work queued on
// that stream so far has run (an event): the DMA that reads or writes it may still be
// queued. Thread-safe.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>

namespace tandem::cuda {

class PinnedPool;

/// One pinned buffer, back to its pool when destroyed. Move-only.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  ~PinnedBuffer();
  PinnedBuffer(PinnedBuffer&& other) noexcept;
  PinnedBuffer& operator=(PinnedBuffer&& other) noexcept;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  void* data() const { return data_; }
  /// Its usable size (the request's size class).
  size_t bytes() const { return bytes_; }
  /// Gives the buffer back, to be reused after the work now queued on `stream` (which
  /// reads or writes it) has run.
  void release_after(cudaStream_t stream);

 private:
  friend class PinnedPool;
  PinnedBuffer(PinnedPool* pool, void* data, size_t bytes) : pool_(pool), data_(data), bytes_(bytes) {}
  PinnedPool* pool_ = nullptr;
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

struct PinnedPoolStats {
  size_t allocations = 0;  // cudaHostAlloc calls
  size_t reuses = 0;       // acquire() served from the cache
  size_t cached_bytes = 0; // held, free or waiting for their events
};

class PinnedPool {
 public:
  /// Keeps at most `max_cached_bytes` of free buffers; more are given back to the system.
  explicit PinnedPool(size_t max_cached_bytes = size_t{256} << 20);
  ~PinnedPool();
  PinnedPool(const PinnedPool&) = delete;
  PinnedPool& operator=(const PinnedPool&) = delete;

  /// A buffer of at least `bytes`, free to use now. Throws UserError when the host cannot
  /// pin that much.
  PinnedBuffer acquire(size_t bytes);
  PinnedPoolStats stats() const;

  /// The process-wide pool the copy helpers use by default. Never destroyed, so buffers
  /// released after main() returns still find it.
  static PinnedPool& shared();

 private:
  friend class PinnedBuffer;
  void give_back(void* data, size_t bytes, cudaStream_t stream, bool after_stream);
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace tandem::cuda
