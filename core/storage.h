// Storage: a block of device memory with its deleter and its device (after c10::Storage).
// Allocator: one per device; hands out Storage and keeps current and peak byte counts.
#pragma once

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>

#include "core/device.h"

namespace tandem {

/// Owns `bytes` bytes at `data` on `device`; frees them through `deleter` when destroyed.
/// Not copyable; shared between tensors through std::shared_ptr.
class Storage {
 public:
  Storage(void* data, size_t bytes, Device device, std::function<void(void*, size_t)> deleter)
      : data_(data), bytes_(bytes), device_(device), deleter_(std::move(deleter)) {}
  ~Storage() {
    if (deleter_) deleter_(data_, bytes_);
  }
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }

 private:
  void* data_;
  size_t bytes_;
  Device device_;
  std::function<void(void*, size_t)> deleter_;
};

/// Memory of one device. Thread-safe: allocate() may be called from any thread.
class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual Device device() const = 0;
  /// Throws OutOfMemory (a UserError) when the device cannot provide `bytes`.
  virtual std::shared_ptr<Storage> allocate(size_t bytes) = 0;

  size_t current_bytes() const { return current_.load(); }
  size_t peak_bytes() const { return peak_.load(); }
  void reset_peak() { peak_.store(current_.load()); }

 protected:
  void count_allocation(size_t bytes);
  void count_free(size_t bytes) { current_.fetch_sub(bytes); }

 private:
  std::atomic<size_t> current_{0};
  std::atomic<size_t> peak_{0};
};

/// Host memory, 64-byte aligned (a cache line; what oneDNN likes).
class CpuAllocator final : public Allocator {
 public:
  Device device() const override { return Device::cpu(); }
  std::shared_ptr<Storage> allocate(size_t bytes) override;
};

/// The process-wide host allocator.
CpuAllocator& cpu_allocator();

}  // namespace tandem
