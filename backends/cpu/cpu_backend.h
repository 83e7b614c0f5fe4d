// The cpu as a Backend (backends/backend.h): host memory, one lane for everything, and the
// cpu's ComputeOps. It copies nothing itself: the other end's backend moves bytes to and
// from host memory.
//
// Its lane is one of two (CpuLane): beside other devices, a host lane on the shared
// engine's compute thread, where the simulated GPUs' kernels run too, so that one OpenMP
// team does all the computing (backends/host_lanes.h); for a plan on the cpu alone, the
// calling thread itself (backends/calling_thread_lane.h), so that a layer costs no
// hand-off between threads.
#pragma once

#include <memory>

#include "backends/calling_thread_lane.h"
#include "backends/host_backend.h"
#include "backends/host_lanes.h"

namespace tandem::cpu {

/// Where the cpu's work runs (see above).
enum class CpuLane { host_engine, calling_thread };

class CpuBackend final : public HostBackend {
 public:
  explicit CpuBackend(CpuLane lane = CpuLane::host_engine);
  ~CpuBackend() override;

  Device device() const override { return Device::cpu(); }
  Allocator& allocator() override { return cpu_allocator(); }
  Lane& lane(LaneKind) override { return *lane_; }
  /// A copy within host memory (a memcpy on the lane).
  void copy(Lane& lane, const BufferRef& dst, const BufferRef& src, size_t bytes,
            std::shared_ptr<TaskGroup> side_by_side) override;
  /// Busy time only: the cpu's side of copies is the other device's to count.
  DeviceCounters counters() const override;

 private:
  std::unique_ptr<HostLane> queue_;              // CpuLane::host_engine
  std::unique_ptr<CallingThreadLane> caller_;   // CpuLane::calling_thread
  Lane* lane_ = nullptr;                        // the one of them it has
};

}  // namespace tandem::cpu
