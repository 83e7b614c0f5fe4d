// The cpu as a Backend (backends/backend.h): host memory, one lane for everything (a host
// lane on the shared engine's compute thread, where the simulated GPUs' kernels run too, so
// that one OpenMP team does all the computing: backends/host_lanes.h), and the cpu's
// ComputeOps. It copies nothing itself: the other end's backend moves bytes to and from
// host memory.
#pragma once

#include <memory>

#include "backends/host_backend.h"
#include "backends/host_lanes.h"

namespace tandem::cpu {

class CpuBackend final : public HostBackend {
 public:
  CpuBackend();
  ~CpuBackend() override;

  Device device() const override { return Device::cpu(); }
  Allocator& allocator() override { return cpu_allocator(); }
  Lane& lane(LaneKind) override { return queue_; }
  /// A copy within host memory (a memcpy on the lane).
  void copy(Lane& lane, const BufferRef& dst, const BufferRef& src, size_t bytes,
            std::shared_ptr<TaskGroup> side_by_side) override;
  /// Busy time only: the cpu's side of copies is the other device's to count.
  DeviceCounters counters() const override;

 private:
  HostLane queue_{"cpu", HostLaneEngine::Lane::compute};
};

}  // namespace tandem::cpu
