#include "backends/cuda/copies.h"

#include <algorithm>
#include <cstring>
#include <mutex>
#include <optional>
#include <set>
#include <utility>

#include "backends/cuda/cuda_allocator.h"
#include "backends/cuda/cuda_error.h"
#include "backends/cuda/device_guard.h"
#include "backends/cuda/stream.h"

namespace tandem::cuda {

bool is_pinned(const void* ptr) {
  cudaPointerAttributes attrs{};
  if (cudaPointerGetAttributes(&attrs, ptr) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return attrs.type == cudaMemoryTypeHost;
}

void copy_to_device_async(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return;
  TANDEM_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream));
}

void copy_to_host_async(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return;
  TANDEM_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream));
}

void copy_to_device(void* dst, const void* src, size_t bytes, cudaStream_t stream, PinnedPool& staging) {
  // Each chunk's buffer goes back to the pool guarded by an event after its DMA: the next
  // acquire() takes another buffer while that DMA runs, and this one again once it has.
  for (size_t done = 0; done < bytes;) {
    const size_t n = std::min(kStagingChunkBytes, bytes - done);
    PinnedBuffer buffer = staging.acquire(n);
    std::memcpy(buffer.data(), static_cast<const char*>(src) + done, n);
    TANDEM_CUDA_CHECK(
        cudaMemcpyAsync(static_cast<char*>(dst) + done, buffer.data(), n, cudaMemcpyHostToDevice, stream));
    buffer.release_after(stream);
    done += n;
  }
}

void copy_to_host(void* dst, const void* src, size_t bytes, cudaStream_t stream, PinnedPool& staging) {
  if (bytes == 0) return;
  int device = 0;
  TANDEM_CUDA_CHECK(cudaStreamGetDevice(stream, &device));
  // Two chunks in flight: the DMA of chunk i runs while the host copies chunk i-1 out.
  struct InFlight {
    PinnedBuffer buffer;
    Event done;
    size_t offset = 0, bytes = 0;
  };
  std::optional<InFlight> previous;
  auto drain = [&](InFlight& chunk) {
    chunk.done.synchronize();
    std::memcpy(static_cast<char*>(dst) + chunk.offset, chunk.buffer.data(), chunk.bytes);
  };
  for (size_t done = 0; done < bytes;) {
    const size_t n = std::min(kStagingChunkBytes, bytes - done);
    InFlight chunk{staging.acquire(n), Event(device), done, n};
    TANDEM_CUDA_CHECK(cudaMemcpyAsync(chunk.buffer.data(), static_cast<const char*>(src) + done, n,
                                      cudaMemcpyDeviceToHost, stream));
    chunk.done.record(stream);
    if (previous) drain(*previous);
    previous = std::move(chunk);
    done += n;
  }
  drain(*previous);
}

bool enable_peer_access(int device, int peer) {
  if (device == peer) return true;
  static std::mutex mutex;
  static std::set<std::pair<int, int>> enabled, refused;
  std::lock_guard lock(mutex);
  if (enabled.count({device, peer})) return true;
  if (refused.count({device, peer})) return false;
  int can = 0;
  TANDEM_CUDA_CHECK(cudaDeviceCanAccessPeer(&can, device, peer));
  if (!can) {
    refused.insert({device, peer});
    return false;
  }
  DeviceGuard guard(device);
  cudaError_t status = cudaDeviceEnablePeerAccess(peer, 0);
  if (status == cudaErrorPeerAccessAlreadyEnabled) cudaGetLastError();
  else TANDEM_CUDA_CHECK(status);
  enabled.insert({device, peer});
  return true;
}

void copy_peer(void* dst, int dst_device, const void* src, int src_device, size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return;
  if (dst_device == src_device) {
    TANDEM_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream));
    return;
  }
  enable_peer_access(dst_device, src_device);  // either engine may drive the copy
  enable_peer_access(src_device, dst_device);
  TANDEM_CUDA_CHECK(cudaMemcpyPeerAsync(dst, dst_device, src, src_device, bytes, stream));
}

Tensor to_device(const Tensor& host, CudaAllocator& allocator, cudaStream_t stream) {
  TANDEM_ASSERT(host.device() == Device::cpu(), "to_device: the tensor is not on the host");
  Tensor out = Tensor::from_storage(allocator.allocate(std::max<size_t>(host.nbytes(), 1), stream), host.shape(),
                                    host.dtype());
  copy_to_device(out.raw_data(), host.raw_data(), host.nbytes(), stream);
  return out;
}

Tensor to_host(const Tensor& device_tensor, cudaStream_t stream) {
  TANDEM_ASSERT(device_tensor.device().kind == DeviceKind::cuda, "to_host: the tensor is not on a GPU");
  Tensor out = Tensor::empty(device_tensor.shape(), device_tensor.dtype());
  copy_to_host(out.raw_data(), device_tensor.raw_data(), device_tensor.nbytes(), stream);
  return out;
}

}  // namespace tandem::cuda
