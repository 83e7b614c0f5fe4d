#include "backends/cuda/pinned_pool.h"

#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "backends/cuda/size_class.h"
#include "core/error.h"
#include "core/memory_size.h"

namespace tandem::cuda {

PinnedBuffer::~PinnedBuffer() {
  if (pool_) pool_->give_back(data_, bytes_, nullptr, false);
}

PinnedBuffer::PinnedBuffer(PinnedBuffer&& other) noexcept
    : pool_(std::exchange(other.pool_, nullptr)), data_(other.data_), bytes_(other.bytes_) {}

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& other) noexcept {
  if (this != &other) {
    if (pool_) pool_->give_back(data_, bytes_, nullptr, false);
    pool_ = std::exchange(other.pool_, nullptr);
    data_ = other.data_;
    bytes_ = other.bytes_;
  }
  return *this;
}

void PinnedBuffer::release_after(cudaStream_t stream) {
  if (!pool_) return;
  std::exchange(pool_, nullptr)->give_back(data_, bytes_, stream, true);
}

namespace {

struct WaitingBuffer {
  void* data;
  size_t bytes;
  int device;
  cudaEvent_t event;
};

}  // namespace

struct PinnedPool::State {
  std::mutex mutex;
  size_t max_cached = 0;
  std::multimap<size_t, void*> free_buffers;  // size class -> buffer
  std::vector<WaitingBuffer> waiting;          // given back, their stream still using them
  std::map<int, std::vector<cudaEvent_t>> spare_events;  // by device (an event records on its device's streams)
  size_t cached = 0;      // every buffer the pool allocated and has not freed
  size_t free_bytes = 0;  // of which in free_buffers
  PinnedPoolStats stats;

  // Called with `mutex` held. The limit is on the free buffers alone: buffers in use (a
  // large pinned tensor, say) must not make every staging chunk that comes back be freed
  // and pinned again (cudaHostAlloc takes milliseconds).
  void keep_or_free(void* data, size_t bytes) {
    if (free_bytes + bytes > max_cached) {
      cudaFreeHost(data);
      cached -= bytes;
      return;
    }
    free_buffers.emplace(bytes, data);
    free_bytes += bytes;
  }

  // Called with `mutex` held.
  void collect_waiting() {
    for (size_t i = 0; i < waiting.size();) {
      cudaError_t status = cudaEventQuery(waiting[i].event);
      if (status == cudaErrorNotReady) {
        ++i;
        continue;
      }
      if (status != cudaSuccess) cudaGetLastError();
      spare_events[waiting[i].device].push_back(waiting[i].event);
      keep_or_free(waiting[i].data, waiting[i].bytes);
      waiting[i] = waiting.back();
      waiting.pop_back();
    }
  }
};

PinnedPool::PinnedPool(size_t max_cached_bytes) : state_(std::make_unique<State>()) {
  state_->max_cached = max_cached_bytes;
}

PinnedPool::~PinnedPool() {
  std::lock_guard lock(state_->mutex);
  for (WaitingBuffer& w : state_->waiting) {
    cudaEventSynchronize(w.event);
    cudaEventDestroy(w.event);
    cudaFreeHost(w.data);
  }
  for (auto& [bytes, data] : state_->free_buffers) cudaFreeHost(data);
  for (auto& [device, events] : state_->spare_events)
    for (cudaEvent_t e : events) cudaEventDestroy(e);
}

PinnedBuffer PinnedPool::acquire(size_t bytes) {
  const size_t rounded = size_class(bytes);
  if (rounded == 0) throw UserError("cannot pin " + std::to_string(bytes) + " bytes of host memory");
  {
    std::lock_guard lock(state_->mutex);
    state_->collect_waiting();
    auto it = state_->free_buffers.find(rounded);
    if (it != state_->free_buffers.end()) {
      void* data = it->second;
      state_->free_buffers.erase(it);
      state_->free_bytes -= rounded;
      ++state_->stats.reuses;
      return PinnedBuffer(this, data, rounded);
    }
    // Counted as cached from now on: the buffer is held until the pool trims it.
    state_->cached += rounded;
    ++state_->stats.allocations;
  }
  void* data = nullptr;
  // Portable: usable with every device, so one pool serves all of them.
  cudaError_t status = cudaHostAlloc(&data, rounded, cudaHostAllocPortable);
  if (status != cudaSuccess) {
    cudaGetLastError();
    std::lock_guard lock(state_->mutex);
    state_->cached -= rounded;
    throw UserError("cannot pin " + format_bytes(rounded) + " of host memory for a copy to or from a GPU (" +
                    cudaGetErrorString(status) + "); free host memory or raise the locked-memory limit (ulimit -l)");
  }
  return PinnedBuffer(this, data, rounded);
}

void PinnedPool::give_back(void* data, size_t bytes, cudaStream_t stream, bool after_stream) {
  std::lock_guard lock(state_->mutex);
  State& s = *state_;
  if (after_stream) {
    int device = 0;
    cudaEvent_t event = nullptr;
    bool recorded = cudaStreamGetDevice(stream, &device) == cudaSuccess;
    if (recorded) {
      int previous = 0;
      cudaGetDevice(&previous);
      cudaSetDevice(device);
      std::vector<cudaEvent_t>& spare = s.spare_events[device];
      if (!spare.empty()) {
        event = spare.back();
        spare.pop_back();
      } else if (cudaEventCreateWithFlags(&event, cudaEventDisableTiming) != cudaSuccess) {
        event = nullptr;
      }
      recorded = event != nullptr && cudaEventRecord(event, stream) == cudaSuccess;
      cudaSetDevice(previous);
    }
    if (recorded) {
      s.waiting.push_back({data, bytes, device, event});
      return;
    }
    // Could not mark the stream: wait for it instead (give_back runs in destructors; no throw).
    cudaGetLastError();
    if (event) s.spare_events[device].push_back(event);
    cudaStreamSynchronize(stream);
  }
  s.keep_or_free(data, bytes);
}

PinnedPoolStats PinnedPool::stats() const {
  std::lock_guard lock(state_->mutex);
  PinnedPoolStats out = state_->stats;
  out.cached_bytes = state_->cached;
  return out;
}

PinnedPool& PinnedPool::shared() {
  static PinnedPool* pool = new PinnedPool();
  return *pool;
}

}  // namespace tandem::cuda
