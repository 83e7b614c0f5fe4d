// Collectives across GPUs: NCCL communicators, made once per set of devices and reused,
// and in-place sum all-reduce and broadcast wrappers that queue on each participant's
// stream (ordered against the rest of that stream's work, no host wait).
//
// Several logical devices may share one physical GPU (CudaContext). NCCL refuses a
// communicator with a device twice, so when the participants' devices repeat, the
// collectives run as device-local work instead: the root's stream waits for every
// participant (events), sums or sends with peer copies and the accumulate kernel, and
// every participant's stream waits for the root before it touches its buffer again.
#pragma once

#include <nccl.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "backends/cuda/cuda_context.h"

namespace tandem::cuda {

[[noreturn]] void throw_nccl_error(ncclResult_t status, const char* call, const char* file, int line);

inline void check_nccl(ncclResult_t status, const char* call, const char* file, int line) {
  if (status != ncclSuccess) [[unlikely]]
    throw_nccl_error(status, call, file, line);
}

/// One communicator per device of a set of distinct GPUs (rank i on devices[i]), made
/// together with ncclCommInitAll. Destroying it destroys the communicators.
class NcclGroup {
 public:
  explicit NcclGroup(std::vector<int> cuda_devices);
  ~NcclGroup();
  NcclGroup(const NcclGroup&) = delete;
  NcclGroup& operator=(const NcclGroup&) = delete;

  const std::vector<int>& devices() const { return devices_; }
  ncclComm_t comm(size_t rank) const { return comms_.at(rank); }

 private:
  std::vector<int> devices_;
  std::vector<ncclComm_t> comms_;
};

/// NcclGroups by device list (in rank order), each made on first use and kept. Thread-safe.
class NcclCache {
 public:
  /// The group for `cuda_devices` (distinct); made now if new.
  NcclGroup& group(const std::vector<int>& cuda_devices);
  /// How many groups this cache has made: a training loop must not raise it after its first step.
  size_t groups_made() const;
  /// The process-wide cache. Never destroyed: NCCL's teardown at exit can wait on other threads.
  static NcclCache& shared();

 private:
  mutable std::mutex mutex_;
  std::map<std::vector<int>, std::unique_ptr<NcclGroup>> groups_;
};

/// One participant of a collective: `count` floats at `data` in the memory of ctx's
/// device, and the stream the collective is queued on (null: ctx's compute stream).
struct CollectiveBuffer {
  CudaContext* ctx = nullptr;
  float* data = nullptr;
  cudaStream_t stream = nullptr;
};

/// Whether the participants' physical devices are distinct, so that NCCL can serve them.
bool nccl_can_serve(std::span<const CollectiveBuffer> buffers);

/// Every buffer becomes the elementwise sum of all of them.
void all_reduce_sum(std::span<const CollectiveBuffer> buffers, int64_t count, NcclCache& cache = NcclCache::shared());
/// Every buffer becomes a copy of buffers[root].
void broadcast(std::span<const CollectiveBuffer> buffers, int64_t count, size_t root,
               NcclCache& cache = NcclCache::shared());

}  // namespace tandem::cuda

#define TANDEM_NCCL_CHECK(call) ::tandem::cuda::check_nccl((call), #call, __FILE__, __LINE__)
