// Storage: a block of device memory with its deleter and its device (after c10::Storage).
// Allocator: one per device; hands out Storage and keeps current and peak byte counts.
#pragma once

#include <atomic>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <mutex>

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

/// Host memory, 64-byte aligned (a cache line; what oneDNN likes), with a cache of freed
/// blocks by size. Why: a forward pass allocates its outputs anew each call, and large
/// blocks fresh from the system arrive unmapped, so every call would page-fault its way
/// through them (three times the time of a 1024x1024 linear layer at batch 256).
/// Thread-safe.
class CpuAllocator final : public Allocator {
 public:
  explicit CpuAllocator(size_t max_cached_bytes = size_t{1} << 30) : max_cached_bytes_(max_cached_bytes) {}
  ~CpuAllocator() override;
  Device device() const override { return Device::cpu(); }
  std::shared_ptr<Storage> allocate(size_t bytes) override;
  /// Bytes held in the cache, free for reuse.
  size_t cached_bytes() const;
  /// Returns every cached block to the system.
  void release_cached();

 private:
  void recycle(void* block, size_t rounded);
  const size_t max_cached_bytes_;
  mutable std::mutex mutex_;
  std::multimap<size_t, void*> cached_;  // rounded size -> block
  size_t cached_total_ = 0;
};

/// The process-wide host allocator. Never destroyed, so that tensors that outlive main()
/// can still give their memory back.
CpuAllocator& cpu_allocator();

}  // namespace tandem
