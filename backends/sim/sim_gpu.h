// A simulated GPU: a Backend (backends/backend.h) for a device cuda:N with its own memory
// pool, a compute queue for its kernels and a copy queue for transfers (as a GPU's stream
// and copy engine), events between queues, and real copies in and out. It computes with the
// ComputeOps it is handed (the cpu's kernels: it includes none itself); its queues are host
// lanes on the shared HostLaneEngine (host_lanes.h).
#pragma once

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <span>

#include "backends/host_backend.h"
#include "backends/host_lanes.h"
#include "core/device.h"
#include "core/storage.h"

namespace tandem {

/// Every member function may be called from any thread. Destroying it runs what is still
/// queued first (see HostLane).
class SimGpu final : public HostBackend {
 public:
  /// cuda:`index`, with a pool of `capacity_bytes` (> 0), computing with `ops` (null: a
  /// device that only stores and copies, for tests of queues and pools).
  SimGpu(int index, size_t capacity_bytes, std::unique_ptr<ComputeOps> ops = nullptr,
         HostLaneEngine& engine = HostLaneEngine::shared());
  ~SimGpu() override;
  SimGpu(const SimGpu&) = delete;
  SimGpu& operator=(const SimGpu&) = delete;

  Device device() const override { return device_; }
  /// This device's memory pool: allocations count against its capacity only.
  PoolAllocator& allocator() override { return allocator_; }
  /// compute: its kernels. copy_in: also the compute queue, where a large copy uses every
  /// core (the compute thread's OpenMP team): the copy engine overlaps kernels, but a
  /// simulated GPU's kernels already use every core, so there a copy only takes one from
  /// them (measured on 2 cores, a model split cpu | cuda:0 | cuda:1 at batch 256, 1 MiB
  /// activations: 7% slower than on one device with its copies on the copy engine, 1% on
  /// the compute queue). copy_out: the copy engine, for what must not wait for the kernels:
  /// gradients going to the host during backward.
  Lane& lane(LaneKind kind) override { return kind == LaneKind::copy_out ? copies_ : compute_; }
  HostLane& compute_queue() { return compute_; }
  HostLane& copy_queue() { return copies_; }

  /// A copy in from the host or a peer (either of this backend's devices may run a peer
  /// copy), or out to the host. On the compute queue a large copy is split over the
  /// compute thread's OpenMP team.
  void copy(Lane& lane, const BufferRef& dst, const BufferRef& src, size_t bytes,
            std::shared_ptr<TaskGroup> side_by_side = nullptr) override;

  /// Device-local collectives, as NCCL's among GPUs that share memory: the first member's
  /// compute queue waits for every member's, sums the tensors in member order (or copies
  /// the root's) into every member's in one task, and every member's queue waits for it.
  /// Every member must be a simulated GPU.
  bool all_reduce_sum(std::span<const CollectiveMember> members) override;
  bool broadcast(std::span<const CollectiveMember> members, size_t root) override;

  /// Between processes: through the runtime's HostTransport, moved by a proxy thread
  /// (sim_inter_process.h). Not offered without a transport.
  std::string make_inter_process_id() override;
  std::unique_ptr<InterProcessCommunicator> join_inter_process(const InterProcessSetup& setup) override;

  /// Counts so far (items still queued are not in them yet). Busy time is the compute
  /// queue's: the copy engine works beside it.
  DeviceCounters counters() const override;

 private:
  /// Runs `work` on the first member's compute queue once every member's compute queue
  /// has reached this point, and makes every member's wait for it.
  static bool collective(std::span<const CollectiveMember> members, std::function<void()> work);

  const Device device_;
  HostLaneEngine& engine_;
  PoolAllocator allocator_;
  std::atomic<size_t> bytes_in_{0}, bytes_out_{0};
  std::atomic<int64_t> copies_in_{0}, copies_out_{0};
  // last: destroyed (drained) first, while the pool and counters their tasks touch exist
  HostLane compute_;
  HostLane copies_;
};

}  // namespace tandem
