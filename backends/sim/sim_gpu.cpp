#include "backends/sim/sim_gpu.h"

#include <algorithm>
#include <vector>
#include <cstring>
#include <string>

#include <omp.h>

#include "backends/sim/sim_inter_process.h"
#include "core/error.h"

namespace tandem {

namespace {

// Checked before the queues exist.
size_t checked_capacity(size_t capacity_bytes) {
  TANDEM_ASSERT(capacity_bytes > 0, "a simulated GPU needs a capacity");
  return capacity_bytes;
}

}  // namespace

SimGpu::SimGpu(int index, size_t capacity_bytes, std::unique_ptr<ComputeOps> ops, HostLaneEngine& engine)
    : HostBackend(std::move(ops)),
      device_(Device::cuda(index)),
      engine_(engine),
      allocator_(device_, checked_capacity(capacity_bytes)),
      compute_(device_.str(), HostLaneEngine::Lane::compute, engine),
      copies_(device_.str() + " copies", HostLaneEngine::Lane::copy, engine) {}

SimGpu::~SimGpu() {
  // A queued peer copy may write into another device: run both queues dry first.
  try {
    synchronize();
  } catch (...) {
    // an error nobody synchronised for; a destructor has no one to tell
  }
}

namespace {

// A bad copy is a bug in the runtime, not the user's doing: an assertion, on the host.
void check_copy(Device self, const BufferRef& dst, const BufferRef& src, size_t bytes) {
  TANDEM_ASSERT(dst.storage && src.storage, "copy on " + self.str() + " without storage");
  const Device to = dst.storage->device(), from = src.storage->device();
  TANDEM_ASSERT(to == self || from == self,
                "copy on " + self.str() + " from " + from.str() + " to " + to.str() + ": neither end is this device");
  TANDEM_ASSERT(dst.offset <= dst.storage->bytes() && bytes <= dst.storage->bytes() - dst.offset,
                "copy of " + std::to_string(bytes) + " bytes runs past its destination");
  TANDEM_ASSERT(src.offset <= src.storage->bytes() && bytes <= src.storage->bytes() - src.offset,
                "copy of " + std::to_string(bytes) + " bytes runs past its source");
}

// On the compute queue a large copy uses the compute thread's OpenMP team, every core, as a
// GPU's copy engine would the whole bus (measured on 2 cores: a 1 MiB copy between layers
// took 135 µs on one thread); on the copy engine's thread it stays on that one thread, so
// as not to bring a second team to the cores the kernels use.
void copy_bytes(const BufferRef& dst, const BufferRef& src, size_t bytes, bool with_team) {
  if (bytes == 0) return;
  char* to = static_cast<char*>(dst.storage->data()) + dst.offset;
  const char* from = static_cast<const char*>(src.storage->data()) + src.offset;
  if (!with_team || bytes < (size_t{256} << 10) || omp_in_parallel()) {
    std::memcpy(to, from, bytes);
    return;
  }
#pragma omp parallel
  {
    const size_t n = static_cast<size_t>(omp_get_num_threads()), t = static_cast<size_t>(omp_get_thread_num());
    const size_t chunk = (bytes / n + 63) / 64 * 64;
    const size_t begin = std::min(bytes, t * chunk), end = std::min(bytes, begin + chunk);
    if (begin < end) std::memcpy(to + begin, from + begin, end - begin);
  }
}

}  // namespace

void SimGpu::copy(Lane& lane, const BufferRef& dst, const BufferRef& src, size_t bytes,
                  std::shared_ptr<TaskGroup> side_by_side) {
  check_copy(device_, dst, src, bytes);
  TANDEM_ASSERT(&lane == &compute_ || &lane == &copies_, "a copy on a lane of another device than " + device_.str());
  // Counted at this device's end only: the other end's counters are its own (the runtime
  // counts them, as it counts the cpu's).
  const Device to = dst.storage->device(), from = src.storage->device();
  lane.submit(
      [this, dst, src, bytes, with_team = &lane == &compute_, to, from] {
        copy_bytes(dst, src, bytes, with_team);
        if (to == from) return;  // within one device: no traffic
        if (to == device_) bytes_in_.fetch_add(bytes), copies_in_.fetch_add(1);
        if (from == device_) bytes_out_.fetch_add(bytes), copies_out_.fetch_add(1);
      },
      std::move(side_by_side));
}

bool SimGpu::collective(std::span<const CollectiveMember> members, std::function<void()> work) {
  std::vector<SimGpu*> gpus;
  for (const CollectiveMember& m : members) {
    auto* gpu = dynamic_cast<SimGpu*>(m.backend);
    if (!gpu || m.tensor.dtype() != DType::float32 || m.tensor.numel() != members[0].tensor.numel()) return false;
    gpus.push_back(gpu);
  }
  HostLane& first = gpus.front()->compute_;
  for (size_t k = 1; k < gpus.size(); ++k) first.wait(gpus[k]->compute_.record());
  first.submit(std::move(work));
  const DeviceEvent done = first.record();
  for (size_t k = 1; k < gpus.size(); ++k) gpus[k]->compute_.wait(done);
  return true;
}

bool SimGpu::all_reduce_sum(std::span<const CollectiveMember> members) {
  std::vector<Tensor> tensors;
  for (const CollectiveMember& m : members) tensors.push_back(m.tensor);
  return collective(members, [tensors] {
    std::vector<float*> data;
    for (const Tensor& t : tensors) data.push_back(t.data<float>());
    const int64_t n = tensors.front().numel();
    const size_t members = data.size();
    // over the compute thread's team, as a GPU's kernel over its SMs; each element summed in
    // member order, whatever the split
#pragma omp parallel for if (n > (int64_t{1} << 16) && !omp_in_parallel())
    for (int64_t i = 0; i < n; ++i) {
      float sum = data[0][i];
      for (size_t k = 1; k < members; ++k) sum += data[k][i];
      for (size_t k = 0; k < members; ++k) data[k][i] = sum;
    }
  });
}

bool SimGpu::broadcast(std::span<const CollectiveMember> members, size_t root) {
  std::vector<Tensor> tensors;
  for (const CollectiveMember& m : members) tensors.push_back(m.tensor);
  return collective(members, [tensors, root] {
    for (size_t k = 0; k < tensors.size(); ++k)
      if (k != root) std::memcpy(tensors[k].raw_data(), tensors[root].raw_data(), tensors[root].nbytes());
  });
}

std::string SimGpu::make_inter_process_id() { return SimInterProcessCommunicator::make_id(); }

std::unique_ptr<InterProcessCommunicator> SimGpu::join_inter_process(const InterProcessSetup& setup) {
  if (!setup.transport) return nullptr;
  return std::make_unique<SimInterProcessCommunicator>(device_, engine_, setup);
}

DeviceCounters SimGpu::counters() const {
  DeviceCounters c;
  c.bytes_in = bytes_in_.load();
  c.bytes_out = bytes_out_.load();
  c.copies_in = copies_in_.load();
  c.copies_out = copies_out_.load();
  c.busy_seconds = compute_.work().busy_seconds;
  return c;
}

}  // namespace tandem
