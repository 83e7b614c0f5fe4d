#include "backends/cpu/cpu_backend.h"

#include <cstring>

#include "backends/cpu/cpu_compute_ops.h"
#include "core/error.h"

namespace tandem::cpu {

CpuBackend::CpuBackend(CpuLane lane) : HostBackend(make_compute_ops()) {
  if (lane == CpuLane::calling_thread) {
    caller_ = std::make_unique<CallingThreadLane>("cpu");
    lane_ = caller_.get();
  } else {
    queue_ = std::make_unique<HostLane>("cpu", HostLaneEngine::Lane::compute);
    lane_ = queue_.get();
  }
}

CpuBackend::~CpuBackend() {
  try {
    lane_->synchronize();
  } catch (...) {
    // an error nobody synchronised for; a destructor has no one to tell
  }
}

void CpuBackend::copy(Lane& lane, const BufferRef& dst, const BufferRef& src, size_t bytes,
                      std::shared_ptr<TaskGroup> side_by_side) {
  TANDEM_ASSERT(dst.storage && src.storage && dst.storage->device() == Device::cpu() &&
                    src.storage->device() == Device::cpu(),
                "a cpu copy between storages that are not both in host memory");
  TANDEM_ASSERT(dst.offset + bytes <= dst.storage->bytes() && src.offset + bytes <= src.storage->bytes(),
                "a cpu copy past the end of its storage");
  lane.submit(
      [dst, src, bytes] {
        std::memcpy(static_cast<char*>(dst.storage->data()) + dst.offset,
                    static_cast<const char*>(src.storage->data()) + src.offset, bytes);
      },
      std::move(side_by_side));
}

DeviceCounters CpuBackend::counters() const {
  DeviceCounters c;
  c.busy_seconds = queue_ ? queue_->work().busy_seconds : caller_->busy_seconds();
  return c;
}

}  // namespace tandem::cpu
