// Host memory that the GPUs' gradients land in on their way to the master (placed
// training): one buffer used as a ring, so that the host holds a bounded amount however
// many replicas' gradients are in flight, the way a GPU runtime reuses its pinned staging
// buffers. A region is handed out again only once the addition that read it has run: the
// copy into it waits for that event on its own queue, so the host never blocks.
#pragma once

#include <cstddef>
#include <deque>
#include <memory>
#include <vector>

#include "backends/lane.h"
#include "core/tensor.h"

namespace tandem {

class HostStagingRing {
 public:
  /// A tensor in the ring, and the events its region's last readers end at: whatever
  /// writes it must wait for them first.
  struct Region {
    Tensor tensor;
    std::vector<DeviceEvent> free_after;
  };

  /// Where the ring's memory comes from (host memory the GPUs copy into fastest: a
  /// backend's host_allocator()); the cpu's by default. Takes effect at the next growth.
  void use_allocator(Allocator& allocator) { allocator_ = &allocator; }
  /// Makes the ring hold at least `bytes` (it grows, never shrinks; regions already handed
  /// out stay valid).
  void reserve(size_t bytes);
  /// Starts a batch of regions that `bytes` (their sum, alignment included: see bytes_for)
  /// will hold, read together; at most the capacity.
  void start(size_t bytes);
  /// A region for a float tensor of `shape`, within the batch started.
  Region take(const Shape& shape);
  /// What a float tensor of `shape` takes in the ring.
  static size_t bytes_for(const Shape& shape);
  /// The batch's regions are read by work that ends at `done`.
  void release_after(const DeviceEvent& done);
  size_t capacity() const { return capacity_; }

 private:
  struct Used {
    size_t begin, end;
    DeviceEvent done;
  };
  Allocator* allocator_ = &cpu_allocator();
  std::shared_ptr<Storage> storage_;
  size_t capacity_ = 0;
  size_t head_ = 0;                           // where the next region starts
  std::deque<Used> used_;                     // regions read by queued work, oldest first
  std::vector<std::pair<size_t, size_t>> pending_;  // the batch's regions, not yet released
  size_t batch_end_ = 0;                            // where the batch started must end
};

}  // namespace tandem
