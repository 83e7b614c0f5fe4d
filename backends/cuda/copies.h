// Copies between the host and a GPU and between GPUs, all queued on a stream the caller
// names (a device's copy stream, ordered against its compute stream by events).
//
// Host memory that is not pinned is staged through pinned buffers (pinned_pool.h) in
// chunks, so that the host's memcpy of one chunk overlaps the DMA of the previous and
// the caller's buffer is free on return. Pinned memory goes straight to cudaMemcpyAsync.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "backends/cuda/pinned_pool.h"
#include "core/tensor.h"

namespace tandem::cuda {

class CudaAllocator;

/// The piece a staged copy moves at a time: large enough that the DMA runs at full
/// speed, small enough that the host's memcpy of the next piece overlaps it.
inline constexpr size_t kStagingChunkBytes = size_t{4} << 20;

/// Whether `ptr` is page-locked host memory (cudaHostAlloc, cudaHostRegister).
bool is_pinned(const void* ptr);

/// Queues a copy of `bytes` from pinned host memory `src` to device memory `dst` on
/// `stream`. `src` must stay unchanged until the stream has run the copy.
void copy_to_device_async(void* dst, const void* src, size_t bytes, cudaStream_t stream);
/// Queues a copy of `bytes` from device memory `src` to pinned host memory `dst` on `stream`;
/// `dst` holds the data once the stream has run it.
void copy_to_host_async(void* dst, const void* src, size_t bytes, cudaStream_t stream);

/// Copies `bytes` from any host memory `src` to device memory `dst` on `stream`, staged.
/// On return `src` may be changed or freed; work queued on `stream` afterwards sees `dst`.
void copy_to_device(void* dst, const void* src, size_t bytes, cudaStream_t stream,
                    PinnedPool& staging = PinnedPool::shared());
/// Copies `bytes` from device memory `src` (as of the work queued on `stream` so far) to
/// any host memory `dst`, staged; returns when `dst` holds them.
void copy_to_host(void* dst, const void* src, size_t bytes, cudaStream_t stream,
                  PinnedPool& staging = PinnedPool::shared());

/// Turns on direct access from `device` to `peer` (NVLink, PCIe peer-to-peer) if the pair
/// supports it, once per ordered pair; returns whether it is on. Thread-safe.
bool enable_peer_access(int device, int peer);
/// Queues a copy of `bytes` from `src` on CUDA device `src_device` to `dst` on
/// `dst_device`, on `stream`. Direct when peer access is on, else the driver stages it
/// through the host; a plain device copy when both are one device.
void copy_peer(void* dst, int dst_device, const void* src, int src_device, size_t bytes, cudaStream_t stream);

/// A copy of host tensor `host` on `allocator`'s device, for work on `stream`.
Tensor to_device(const Tensor& host, CudaAllocator& allocator, cudaStream_t stream);
/// A host copy of device tensor `device_tensor` as of the work queued on `stream`; returns
/// when it is complete.
Tensor to_host(const Tensor& device_tensor, cudaStream_t stream);

}  // namespace tandem::cuda
