#include "runtime/params/host_staging_ring.h"

#include <iterator>

#include "core/error.h"

namespace tandem {

namespace {
constexpr size_t kAlign = 64;  // a cache line
size_t aligned(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }
}  // namespace

void HostStagingRing::reserve(size_t bytes) {
  bytes = aligned(bytes);
  if (bytes <= capacity_) return;
  TANDEM_ASSERT(pending_.empty(), "the staging ring grew while regions were being taken");
  // A new buffer: the old one lives on in the tensors still queued, nothing waits on it.
  storage_ = Tensor::empty({static_cast<int64_t>(bytes / sizeof(float))}, DType::float32, *allocator_).storage();
  capacity_ = bytes;
  head_ = 0;
  used_.clear();
}

size_t HostStagingRing::bytes_for(const Shape& shape) {
  return aligned(static_cast<size_t>(shape_numel(shape)) * sizeof(float));
}

void HostStagingRing::start(size_t bytes) {
  TANDEM_ASSERT(pending_.empty(), "a staging batch started before the last was released");
  TANDEM_ASSERT(bytes <= capacity_, "a staging batch larger than the ring");
  if (head_ + bytes > capacity_) head_ = 0;  // the batch's regions lie in one piece
  batch_end_ = head_ + bytes;
}

HostStagingRing::Region HostStagingRing::take(const Shape& shape) {
  const size_t begin = head_, end = begin + bytes_for(shape);
  TANDEM_ASSERT(end <= batch_end_, "a staging region past the batch started");
  Region region;
  // Every older use overlapping [begin, end) must be done before this one is written. A
  // use that this region covers whole is forgotten (this one supersedes it); one it covers
  // in part is kept for the rest of its bytes; one that is done needs no waiting.
  for (auto it = used_.begin(); it != used_.end();) {
    if (it->done.done()) {
      it = used_.erase(it);
    } else if (it->end > begin && it->begin < end) {
      region.free_after.push_back(it->done);
      it = begin <= it->begin && it->end <= end ? used_.erase(it) : std::next(it);
    } else {
      ++it;
    }
  }
  region.tensor = Tensor::from_storage(storage_, shape, DType::float32, begin);
  pending_.emplace_back(begin, end);
  head_ = end;
  return region;
}

void HostStagingRing::release_after(const DeviceEvent& done) {
  for (const auto& [b, e] : pending_) used_.push_back({b, e, done});
  pending_.clear();
}

}  // namespace tandem
