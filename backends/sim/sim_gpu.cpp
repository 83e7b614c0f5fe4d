#include "backends/sim/sim_gpu.h"

#include <chrono>
#include <cstring>
#include <string>

#include <omp.h>

#include "core/error.h"

namespace tandem {

namespace {

// Checked before the queues exist.
size_t checked_capacity(size_t capacity_bytes) {
  TANDEM_ASSERT(capacity_bytes > 0, "a simulated GPU needs a capacity");
  return capacity_bytes;
}

}  // namespace

SimGpu::SimGpu(int index, size_t capacity_bytes, SimEngine& engine)
    : device_(Device::cuda(index)),
      allocator_(device_, checked_capacity(capacity_bytes)),
      compute_(device_.str(), SimEngine::Lane::compute, engine),
      copies_(device_.str() + " copies", SimEngine::Lane::copy, engine) {}

void SimGpu::synchronize() {
  // Both, even when the first fails: the host must not go on with the other still running.
  std::exception_ptr error;
  for (SimQueue* q : {&compute_, &copies_}) {
    try {
      q->synchronize();
    } catch (...) {
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
}

// A bad copy is a bug in the runtime, not the user's doing: an assertion, on the host.
void SimGpu::check_copy(const BufferRef& dst, Device dst_device, const BufferRef& src, Device src_device,
                        size_t bytes) const {
  TANDEM_ASSERT(dst.storage && src.storage, "copy on " + device_.str() + " without storage");
  TANDEM_ASSERT(dst.storage->device() == dst_device,
                "copy to " + dst_device.str() + " into storage on " + dst.storage->device().str());
  TANDEM_ASSERT(src.storage->device() == src_device,
                "copy from " + src_device.str() + " out of storage on " + src.storage->device().str());
  TANDEM_ASSERT(dst.offset <= dst.storage->bytes() && bytes <= dst.storage->bytes() - dst.offset,
                "copy of " + std::to_string(bytes) + " bytes runs past its destination");
  TANDEM_ASSERT(src.offset <= src.storage->bytes() && bytes <= src.storage->bytes() - src.offset,
                "copy of " + std::to_string(bytes) + " bytes runs past its source");
}

namespace {

// On the compute queue a large copy uses the compute thread's OpenMP team, every core, as a
// GPU's copy engine would the whole bus (measured on 2 cores: a 1 MiB copy between layers
// took 135 µs on one thread); on the copy engine's thread it stays on that one thread, so
// as not to bring a second team to the cores the kernels use.
void copy_bytes(const BufferRef& dst, const BufferRef& src, size_t bytes, SimGpu::Stream stream) {
  if (bytes == 0) return;
  char* to = static_cast<char*>(dst.storage->data()) + dst.offset;
  const char* from = static_cast<const char*>(src.storage->data()) + src.offset;
  if (stream != SimGpu::Stream::compute || bytes < (size_t{256} << 10) || omp_in_parallel()) {
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

void SimGpu::copy_from_host(BufferRef dst, BufferRef src, size_t bytes, Stream stream,
                            std::shared_ptr<TaskGroup> group) {
  check_copy(dst, device_, src, Device::cpu(), bytes);
  queue(stream).submit(
      [this, dst = std::move(dst), src = std::move(src), bytes, stream] {
        copy_bytes(dst, src, bytes, stream);
        bytes_in_.fetch_add(bytes);
        copies_in_.fetch_add(1);
      },
      std::move(group));
}

void SimGpu::copy_to_host(BufferRef dst, BufferRef src, size_t bytes, Stream stream) {
  check_copy(dst, Device::cpu(), src, device_, bytes);
  queue(stream).submit([this, dst = std::move(dst), src = std::move(src), bytes, stream] {
    copy_bytes(dst, src, bytes, stream);
    bytes_out_.fetch_add(bytes);
    copies_out_.fetch_add(1);
  });
}

void SimGpu::copy_peer(SimGpu& dst_gpu, BufferRef dst, BufferRef src, size_t bytes, Stream stream) {
  check_copy(dst, dst_gpu.device(), src, device_, bytes);
  queue(stream).submit([this, &dst_gpu, dst = std::move(dst), src = std::move(src), bytes, stream] {
    copy_bytes(dst, src, bytes, stream);
    if (&dst_gpu == this) return;  // within one device: no traffic
    bytes_out_.fetch_add(bytes);
    copies_out_.fetch_add(1);
    dst_gpu.bytes_in_.fetch_add(bytes);
    dst_gpu.copies_in_.fetch_add(1);
  });
}

QueueStats SimGpu::stats() const {
  QueueStats s;
  s.bytes_in = bytes_in_.load();
  s.bytes_out = bytes_out_.load();
  s.copies_in = copies_in_.load();
  s.copies_out = copies_out_.load();
  QueueWork work = compute_.work();
  s.tasks_run = work.tasks_run + copies_.work().tasks_run;
  s.busy_seconds = work.busy_seconds;
  return s;
}

}  // namespace tandem
