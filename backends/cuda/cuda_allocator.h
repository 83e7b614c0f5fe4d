// CudaAllocator: the memory of one GPU, handed out as core's Storage and cached for reuse,
// as torch's CUDA caching allocator. cudaMalloc and cudaFree are slow (cudaFree waits for
// the whole device), and a training step allocates the same shapes every time; so freed
// blocks stay with the allocator, binned by size class (size_class.h), and the next
// request of that class takes one back at no cost.
//
// Streams. A block belongs to the stream it was allocated for. Work on one stream runs in
// order, so a block freed on the host while kernels that use it are still queued can be
// handed to the next request on the same stream at once: that request's work is queued
// behind them. A block that was also used on other streams (record_stream()) is held back
// until an event recorded on each of those streams at the free has passed.
//
// Accounting. current_bytes() and peak_bytes() count the bytes of blocks in use (whole
// size classes); cached blocks are counted apart (stats()). With a capacity, in use plus
// cached never exceeds it: an allocation that would go over first gives the cache back to
// the device, then throws OutOfMemory. cudaMalloc failing is handled the same way.
//
// Thread-safe. Storage handed out may outlive the allocator: its block is then freed
// directly with cudaFree.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>

#include "core/storage.h"

namespace tandem::cuda {

struct CudaAllocatorStats {
  size_t current_bytes = 0;       // in use
  size_t peak_bytes = 0;          // most in use at once since the last reset_peak()
  size_t cached_bytes = 0;        // free for reuse, still held from the device
  size_t pending_bytes = 0;       // freed, waiting for other streams' work (counted in cached_bytes)
  size_t device_allocations = 0;  // cudaMalloc calls
  size_t device_frees = 0;        // cudaFree calls
  size_t cache_hits = 0;          // allocations served from the cache
};

class CudaAllocator final : public Allocator {
 public:
  /// Memory of CUDA device `cuda_device`, reported as `device` (a logical cuda:N, which
  /// may share a physical GPU with others). `default_stream` serves allocate(bytes).
  /// `capacity` 0: as much as the device gives.
  CudaAllocator(Device device, int cuda_device, cudaStream_t default_stream, size_t capacity = 0);
  ~CudaAllocator() override;
  CudaAllocator(const CudaAllocator&) = delete;
  CudaAllocator& operator=(const CudaAllocator&) = delete;

  Device device() const override { return device_; }
  int cuda_device() const { return cuda_device_; }
  /// A block for work on the default stream.
  std::shared_ptr<Storage> allocate(size_t bytes) override;
  /// A block for work on `stream`. Throws OutOfMemory (a UserError).
  std::shared_ptr<Storage> allocate(size_t bytes, cudaStream_t stream);
  /// Marks `storage` (from this allocator) as used by work on `stream` too, so that when
  /// it is freed its block waits for that work before anyone reuses it.
  void record_stream(const Storage& storage, cudaStream_t stream);

  /// 0 when unlimited by the allocator.
  size_t capacity() const { return capacity_; }
  CudaAllocatorStats stats() const;
  /// Gives every cached block back to the device (waiting for pending ones first).
  void release_cached();

 private:
  struct State;  // shared with the deleters of the storage handed out
  const Device device_;
  const int cuda_device_;
  const cudaStream_t default_stream_;
  const size_t capacity_;
  std::shared_ptr<State> state_;
};

}  // namespace tandem::cuda
