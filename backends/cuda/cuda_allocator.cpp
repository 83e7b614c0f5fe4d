#include "backends/cuda/cuda_allocator.h"

#include <map>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backends/cuda/device_guard.h"
#include "backends/cuda/size_class.h"
#include "core/error.h"

namespace tandem::cuda {
namespace {

struct Block {
  size_t size = 0;              // its size class
  cudaStream_t stream{};        // the stream it was allocated for
  std::vector<cudaStream_t> other_streams;  // record_stream()
};

/// A freed block that waits for events on the other streams that used it.
struct PendingBlock {
  void* ptr = nullptr;
  Block block;
  std::vector<cudaEvent_t> events;
};

}  // namespace

// Lives apart from the allocator so that storage freed after the allocator is gone still
// finds a mutex to take; `owner` is then null and blocks go straight back to the device.
struct CudaAllocator::State {
  std::mutex mutex;
  CudaAllocator* owner = nullptr;
  int cuda_device = 0;
  std::map<std::pair<cudaStream_t, size_t>, std::vector<void*>> free_blocks;  // (stream, class) -> blocks
  std::unordered_map<void*, Block> active;
  std::vector<PendingBlock> pending;
  std::vector<cudaEvent_t> spare_events;
  size_t cached = 0, pending_bytes = 0;
  size_t device_allocations = 0, device_frees = 0, cache_hits = 0;

  // All of the below: called with `mutex` held.

  void cache(void* ptr, const Block& block) {
    free_blocks[{block.stream, block.size}].push_back(ptr);
    cached += block.size;
  }

  /// Moves pending blocks whose events have all passed into the cache.
  void collect_pending() {
    for (size_t i = 0; i < pending.size();) {
      PendingBlock& p = pending[i];
      bool done = true;
      for (cudaEvent_t e : p.events) {
        cudaError_t status = cudaEventQuery(e);
        if (status == cudaErrorNotReady) {
          done = false;
          break;
        }
        if (status != cudaSuccess) cudaGetLastError();  // a failed stream: its error surfaces at its own sync
      }
      if (!done) {
        ++i;
        continue;
      }
      for (cudaEvent_t e : p.events) spare_events.push_back(e);
      pending_bytes -= p.block.size;
      cached -= p.block.size;  // cache() counts it again
      cache(p.ptr, p.block);
      p = std::move(pending.back());
      pending.pop_back();
    }
  }

  /// Returns every cached block to the device; pending ones after their events.
  void release_cached() {
    DeviceGuard guard(cuda_device);
    for (PendingBlock& p : pending) {
      for (cudaEvent_t e : p.events) {
        cudaEventSynchronize(e);
        spare_events.push_back(e);
      }
      cudaFree(p.ptr);
      ++device_frees;
    }
    pending.clear();
    for (auto& [key, blocks] : free_blocks)
      for (void* ptr : blocks) {
        cudaFree(ptr);
        ++device_frees;
      }
    free_blocks.clear();
    cached = 0;
    pending_bytes = 0;
  }

  /// The deleter's work. Must not throw: on any failure it waits for the block's streams
  /// instead of recording events, which is slower but safe.
  void free(void* ptr) noexcept {
    std::lock_guard lock(mutex);
    auto it = active.find(ptr);
    if (owner == nullptr || it == active.end()) {
      cudaFree(ptr);
      if (it != active.end()) active.erase(it);
      return;
    }
    Block block = std::move(it->second);
    active.erase(it);
    owner->count_free(block.size);
    if (block.other_streams.empty()) return cache(ptr, block);
    int previous = 0;
    cudaGetDevice(&previous);
    cudaSetDevice(cuda_device);
    PendingBlock p{ptr, block, {}};
    bool recorded = true;
    for (cudaStream_t s : block.other_streams) {
      cudaEvent_t e = nullptr;
      if (!spare_events.empty()) {
        e = spare_events.back();
        spare_events.pop_back();
      } else if (cudaEventCreateWithFlags(&e, cudaEventDisableTiming) != cudaSuccess) {
        recorded = false;
        break;
      }
      p.events.push_back(e);
      if (cudaEventRecord(e, s) != cudaSuccess) {
        recorded = false;
        break;
      }
    }
    if (!recorded) {
      cudaGetLastError();
      for (cudaStream_t s : block.other_streams) cudaStreamSynchronize(s);
      for (cudaEvent_t e : p.events) spare_events.push_back(e);
      cache(ptr, block);
    } else {
      pending.push_back(std::move(p));
      cached += block.size;
      pending_bytes += block.size;
    }
    cudaSetDevice(previous);
  }
};

CudaAllocator::CudaAllocator(Device device, int cuda_device, cudaStream_t default_stream, size_t capacity)
    : device_(device),
      cuda_device_(cuda_device),
      default_stream_(default_stream),
      capacity_(capacity),
      state_(std::make_shared<State>()) {
  state_->owner = this;
  state_->cuda_device = cuda_device;
}

CudaAllocator::~CudaAllocator() {
  std::lock_guard lock(state_->mutex);
  state_->owner = nullptr;
  try {
    state_->release_cached();
  } catch (const std::exception&) {  // the device is gone (a failed driver): nothing left to give back
  }
  for (cudaEvent_t e : state_->spare_events) cudaEventDestroy(e);
  state_->spare_events.clear();
}

std::shared_ptr<Storage> CudaAllocator::allocate(size_t bytes) { return allocate(bytes, default_stream_); }

std::shared_ptr<Storage> CudaAllocator::allocate(size_t bytes, cudaStream_t stream) {
  const size_t rounded = size_class(bytes);
  std::lock_guard lock(state_->mutex);
  State& s = *state_;
  auto out_of_memory = [&] {
    size_t total = capacity_;
    if (total == 0) {
      size_t free_bytes = 0;
      DeviceGuard guard(cuda_device_);
      if (cudaMemGetInfo(&free_bytes, &total) != cudaSuccess) {
        cudaGetLastError();
        total = 0;  // not known: the message leaves the capacity out
      }
    }
    return OutOfMemory(device_, bytes, current_bytes(), total);
  };
  if (rounded == 0) throw out_of_memory();
  s.collect_pending();
  void* ptr = nullptr;
  auto it = s.free_blocks.find({stream, rounded});
  if (it != s.free_blocks.end() && !it->second.empty()) {
    ptr = it->second.back();
    it->second.pop_back();
    s.cached -= rounded;
    ++s.cache_hits;
  } else {
    if (capacity_ > 0 && current_bytes() + s.cached + rounded > capacity_) s.release_cached();
    if (capacity_ > 0 && rounded > capacity_ - std::min(capacity_, current_bytes())) throw out_of_memory();
    DeviceGuard guard(cuda_device_);
    cudaError_t status = cudaMalloc(&ptr, rounded);
    if (status == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      s.release_cached();
      status = cudaMalloc(&ptr, rounded);
      if (status == cudaErrorMemoryAllocation) {
        cudaGetLastError();
        throw out_of_memory();
      }
    }
    TANDEM_CUDA_CHECK(status);
    ++s.device_allocations;
  }
  count_allocation(rounded);
  s.active[ptr] = Block{rounded, stream, {}};
  std::shared_ptr<State> state = state_;
  return std::make_shared<Storage>(ptr, bytes, device_, [state](void* p, size_t) { state->free(p); });
}

void CudaAllocator::record_stream(const Storage& storage, cudaStream_t stream) {
  std::lock_guard lock(state_->mutex);
  auto it = state_->active.find(storage.data());
  TANDEM_ASSERT(it != state_->active.end(), "record_stream: the storage is not from this allocator");
  Block& block = it->second;
  if (stream == block.stream) return;
  for (cudaStream_t s : block.other_streams)
    if (s == stream) return;
  block.other_streams.push_back(stream);
}

CudaAllocatorStats CudaAllocator::stats() const {
  std::lock_guard lock(state_->mutex);
  CudaAllocatorStats out;
  out.current_bytes = current_bytes();
  out.peak_bytes = peak_bytes();
  out.cached_bytes = state_->cached;
  out.pending_bytes = state_->pending_bytes;
  out.device_allocations = state_->device_allocations;
  out.device_frees = state_->device_frees;
  out.cache_hits = state_->cache_hits;
  return out;
}

void CudaAllocator::release_cached() {
  std::lock_guard lock(state_->mutex);
  state_->release_cached();
}

}  // namespace tandem::cuda
