#include "backends/sim/sim_gpu.h"

#include <chrono>
#include <cstring>
#include <string>

#include "core/error.h"

namespace tandem {

bool Event::done() const {
  if (!state_) return true;
  std::lock_guard lock(state_->mutex);
  return state_->done;
}

void Event::wait() const {
  if (!state_) return;
  std::unique_lock lock(state_->mutex);
  state_->reached.wait(lock, [&] { return state_->done; });
  if (state_->error) std::rethrow_exception(state_->error);
}

namespace {

// Checked before the worker starts: a constructor that throws after it would leave a
// joinable thread behind.
size_t checked_capacity(size_t capacity_bytes) {
  TANDEM_ASSERT(capacity_bytes > 0, "a simulated GPU needs a capacity");
  return capacity_bytes;
}

}  // namespace

SimGpu::SimGpu(int index, size_t capacity_bytes)
    : device_(Device::cuda(index)),
      allocator_(device_, checked_capacity(capacity_bytes)),
      worker_([this] { run_worker(); }) {}

SimGpu::~SimGpu() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  work_ready_.notify_all();
  worker_.join();
}

void SimGpu::enqueue(Item item) {
  {
    std::lock_guard lock(mutex_);
    TANDEM_ASSERT(!stopping_, device_.str() + " is shutting down");
    queue_.push_back(std::move(item));
    ++unfinished_;
  }
  work_ready_.notify_one();
}

void SimGpu::submit(std::function<void()> task) { enqueue({ItemKind::task, std::move(task), nullptr}); }

Event SimGpu::record() {
  Event event;
  event.state_ = std::make_shared<Event::State>();
  enqueue({ItemKind::record, nullptr, event.state_});
  return event;
}

void SimGpu::submit_wait(const Event& event) {
  if (!event.state_) return;
  enqueue({ItemKind::wait, nullptr, event.state_});
}

void SimGpu::synchronize() {
  std::exception_ptr error;
  {
    std::unique_lock lock(mutex_);
    idle_.wait(lock, [&] { return unfinished_ == 0; });
    error.swap(error_);
  }
  if (error) std::rethrow_exception(error);
}

void SimGpu::run_worker() {
  for (;;) {
    Item item;
    std::exception_ptr error;
    {
      std::unique_lock lock(mutex_);
      work_ready_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and drained
      item = std::move(queue_.front());
      queue_.pop_front();
      error = error_;
    }
    switch (item.kind) {
      case ItemKind::task:
        if (!error) run_task(item.task);  // after a failure, later tasks are skipped
        break;
      case ItemKind::record: {
        {
          std::lock_guard lock(item.event->mutex);
          item.event->done = true;
          item.event->error = error;
        }
        item.event->reached.notify_all();
        break;
      }
      case ItemKind::wait: {
        std::exception_ptr upstream;
        {
          std::unique_lock lock(item.event->mutex);
          item.event->reached.wait(lock, [&] { return item.event->done; });
          upstream = item.event->error;
        }
        if (upstream) {
          std::lock_guard lock(mutex_);
          if (!error_) error_ = upstream;
        }
        break;
      }
    }
    {
      std::lock_guard lock(mutex_);
      --unfinished_;
      if (unfinished_ == 0) idle_.notify_all();
    }
  }
}

void SimGpu::run_task(const std::function<void()>& task) {
  auto start = std::chrono::steady_clock::now();
  try {
    task();
  } catch (...) {
    std::lock_guard lock(mutex_);
    if (!error_) error_ = std::current_exception();
  }
  auto elapsed = std::chrono::steady_clock::now() - start;
  busy_ns_.fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(elapsed).count());
  tasks_run_.fetch_add(1);
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

void copy_bytes(const BufferRef& dst, const BufferRef& src, size_t bytes) {
  if (bytes == 0) return;
  std::memcpy(static_cast<char*>(dst.storage->data()) + dst.offset,
              static_cast<const char*>(src.storage->data()) + src.offset, bytes);
}

}  // namespace

void SimGpu::copy_from_host(BufferRef dst, BufferRef src, size_t bytes) {
  check_copy(dst, device_, src, Device::cpu(), bytes);
  submit([this, dst = std::move(dst), src = std::move(src), bytes] {
    copy_bytes(dst, src, bytes);
    bytes_in_.fetch_add(bytes);
    copies_in_.fetch_add(1);
  });
}

void SimGpu::copy_to_host(BufferRef dst, BufferRef src, size_t bytes) {
  check_copy(dst, Device::cpu(), src, device_, bytes);
  submit([this, dst = std::move(dst), src = std::move(src), bytes] {
    copy_bytes(dst, src, bytes);
    bytes_out_.fetch_add(bytes);
    copies_out_.fetch_add(1);
  });
}

void SimGpu::copy_peer(SimGpu& dst_gpu, BufferRef dst, BufferRef src, size_t bytes) {
  check_copy(dst, dst_gpu.device(), src, device_, bytes);
  submit([this, &dst_gpu, dst = std::move(dst), src = std::move(src), bytes] {
    copy_bytes(dst, src, bytes);
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
  s.tasks_run = tasks_run_.load();
  s.busy_seconds = static_cast<double>(busy_ns_.load()) * 1e-9;
  return s;
}

}  // namespace tandem
