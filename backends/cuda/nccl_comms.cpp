#include "backends/cuda/nccl_comms.h"

#include <set>
#include <string>

#include "backends/cuda/copies.h"
#include "backends/cuda/cuda_error.h"
#include "backends/cuda/device_guard.h"
#include "backends/cuda/kernels/pointwise.cuh"
#include "core/error.h"

namespace tandem::cuda {

void throw_nccl_error(ncclResult_t status, const char* call, const char* file, int line) {
  // A system error (out of host resources, a broken network or shared memory setup) is the
  // user's to fix; invalid usage and internal errors are Tandem's.
  const bool user_caused = status == ncclSystemError || status == ncclRemoteError;
  const char* detail = ncclGetLastError(nullptr);  // the last failure's own words, when NCCL kept them
  throw_failed_call({"NCCL", static_cast<int>(status), ncclGetErrorString(status),
                     detail && *detail ? detail : ncclGetErrorString(status), call, file, line, user_caused});
}

NcclGroup::NcclGroup(std::vector<int> cuda_devices) : devices_(std::move(cuda_devices)) {
  TANDEM_ASSERT(!devices_.empty(), "an NCCL group needs a device");
  TANDEM_ASSERT(std::set<int>(devices_.begin(), devices_.end()).size() == devices_.size(),
                "an NCCL group's devices must be distinct");
  comms_.resize(devices_.size());
  TANDEM_NCCL_CHECK(ncclCommInitAll(comms_.data(), static_cast<int>(devices_.size()), devices_.data()));
}

NcclGroup::~NcclGroup() {
  for (ncclComm_t comm : comms_)
    if (comm) ncclCommDestroy(comm);
}

NcclGroup& NcclCache::group(const std::vector<int>& cuda_devices) {
  std::lock_guard lock(mutex_);
  std::unique_ptr<NcclGroup>& slot = groups_[cuda_devices];
  if (!slot) slot = std::make_unique<NcclGroup>(cuda_devices);
  return *slot;
}

size_t NcclCache::groups_made() const {
  std::lock_guard lock(mutex_);
  return groups_.size();
}

NcclCache& NcclCache::shared() {
  static NcclCache* cache = new NcclCache();
  return *cache;
}

namespace {

cudaStream_t stream_of(const CollectiveBuffer& b) { return b.stream ? b.stream : b.ctx->stream().get(); }
int device_of(const CollectiveBuffer& b) { return b.ctx->cuda_device(); }

std::vector<int> devices_of(std::span<const CollectiveBuffer> buffers) {
  std::vector<int> devices;
  for (const CollectiveBuffer& b : buffers) devices.push_back(device_of(b));
  return devices;
}

/// `waiter`'s stream waits for everything queued so far on `other`'s.
void order_after(const CollectiveBuffer& waiter, const CollectiveBuffer& other) {
  if (stream_of(waiter) == stream_of(other)) return;
  Event event(device_of(other));
  event.record(stream_of(other));
  TANDEM_CUDA_CHECK(cudaStreamWaitEvent(stream_of(waiter), event.get(), 0));
}

/// The fallback's all-reduce: sums into buffers[0] on its stream, then copies the sum out.
void local_all_reduce(std::span<const CollectiveBuffer> buffers, int64_t count) {
  const CollectiveBuffer& root = buffers[0];
  const cudaStream_t stream = stream_of(root);
  const size_t bytes = sizeof(float) * static_cast<size_t>(count);
  DeviceGuard guard(device_of(root));
  std::shared_ptr<Storage> staging;  // a peer's data on the root's device
  for (size_t i = 1; i < buffers.size(); ++i) {
    const CollectiveBuffer& b = buffers[i];
    order_after(root, b);
    const float* source = b.data;
    if (device_of(b) != device_of(root)) {
      if (!staging) staging = root.ctx->allocator().allocate(bytes, stream);
      copy_peer(staging->data(), device_of(root), b.data, device_of(b), bytes, stream);
      source = static_cast<const float*>(staging->data());
    }
    accumulate(root.data, source, 1.f, count, stream);
  }
  for (size_t i = 1; i < buffers.size(); ++i) {
    copy_peer(buffers[i].data, device_of(buffers[i]), root.data, device_of(root), bytes, stream);
    order_after(buffers[i], root);
  }
  // `staging` goes back to the root's allocator for its stream, where later work is queued behind these copies.
}

void local_broadcast(std::span<const CollectiveBuffer> buffers, int64_t count, size_t root_index) {
  const CollectiveBuffer& root = buffers[root_index];
  const size_t bytes = sizeof(float) * static_cast<size_t>(count);
  DeviceGuard guard(device_of(root));
  for (size_t i = 0; i < buffers.size(); ++i) {
    if (i == root_index) continue;
    order_after(root, buffers[i]);  // the receiver is done with its old values
    copy_peer(buffers[i].data, device_of(buffers[i]), root.data, device_of(root), bytes, stream_of(root));
  }
  for (size_t i = 0; i < buffers.size(); ++i)
    if (i != root_index) order_after(buffers[i], root);
}

}  // namespace

bool nccl_can_serve(std::span<const CollectiveBuffer> buffers) {
  std::vector<int> devices = devices_of(buffers);
  return std::set<int>(devices.begin(), devices.end()).size() == devices.size();
}

void all_reduce_sum(std::span<const CollectiveBuffer> buffers, int64_t count, NcclCache& cache) {
  if (buffers.size() <= 1 || count == 0) return;
  if (!nccl_can_serve(buffers)) return local_all_reduce(buffers, count);
  NcclGroup& group = cache.group(devices_of(buffers));
  TANDEM_NCCL_CHECK(ncclGroupStart());
  for (size_t rank = 0; rank < buffers.size(); ++rank) {
    const CollectiveBuffer& b = buffers[rank];
    const ncclResult_t status = ncclAllReduce(b.data, b.data, static_cast<size_t>(count), ncclFloat, ncclSum,
                                              group.comm(rank), stream_of(b));
    if (status != ncclSuccess) {
      ncclGroupEnd();
      throw_nccl_error(status, "ncclAllReduce", __FILE__, __LINE__);
    }
  }
  TANDEM_NCCL_CHECK(ncclGroupEnd());
}

void broadcast(std::span<const CollectiveBuffer> buffers, int64_t count, size_t root, NcclCache& cache) {
  TANDEM_ASSERT(root < buffers.size(), "broadcast: root out of range");
  if (buffers.size() <= 1 || count == 0) return;
  if (!nccl_can_serve(buffers)) return local_broadcast(buffers, count, root);
  NcclGroup& group = cache.group(devices_of(buffers));
  TANDEM_NCCL_CHECK(ncclGroupStart());
  for (size_t rank = 0; rank < buffers.size(); ++rank) {
    const CollectiveBuffer& b = buffers[rank];
    const ncclResult_t status = ncclBroadcast(b.data, b.data,
                                              static_cast<size_t>(count), ncclFloat, static_cast<int>(root),
                                              group.comm(rank), stream_of(b));
    if (status != ncclSuccess) {
      ncclGroupEnd();
      throw_nccl_error(status, "ncclBroadcast", __FILE__, __LINE__);
    }
  }
  TANDEM_NCCL_CHECK(ncclGroupEnd());
}

}  // namespace tandem::cuda
