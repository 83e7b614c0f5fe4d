// Storage: a block of device memory with its deleter and its device (after c10::Storage).
// Allocator: one per device; hands out Storage and keeps current and peak byte counts.
#pragma once

#include <atomic>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <mutex>

#include "core/bf16_copy.h"
#include "core/device.h"

namespace tandem {

/// Owns `bytes` bytes at `data` on `device`; frees them through `deleter` when destroyed.
/// Not copyable; shared between tensors through std::shared_ptr.
class Storage {
 public:
  Storage(void* data, size_t bytes, Device device, std::function<void(void*, size_t)> deleter)
      : data_(data), bytes_(bytes), device_(device), deleter_(std::move(deleter)) {}
  ~Storage() {
    delete bf16_copy_.load();
    if (deleter_) deleter_(data_, bytes_);
  }
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }

  /// The bf16 copy of this storage's float32 values (Note [a weight's bf16 copy] in
  /// core/bf16_copy.h), made at the first call. Thread-safe.
  Bf16Copy& bf16_copy();
  /// That copy if one was made, else null. Thread-safe.
  Bf16Copy* find_bf16_copy() const { return bf16_copy_.load(std::memory_order_acquire); }

 private:
  void* data_;
  size_t bytes_;
  Device device_;
  std::function<void(void*, size_t)> deleter_;
  std::atomic<Bf16Copy*> bf16_copy_{nullptr};
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

/// Memory in 64-byte aligned host blocks, with a cache of freed blocks by size class, and
/// optionally a capacity. Why the cache: a forward pass allocates its outputs anew each call,
/// and large blocks fresh from the system arrive unmapped, so every call would page-fault its
/// way through them (three times the time of a 1024x1024 linear layer at batch 256).
///
/// Bytes are counted in size classes (the request rounded up to 64 bytes). With a capacity,
/// the bytes in use plus the bytes cached never exceed it, as on a GPU, where cached blocks
/// still occupy the device: an allocate() that would go over first returns the whole cache
/// to the system, then throws OutOfMemory if the request still does not fit.
///
/// Thread-safe. Storage handed out may outlive the allocator: its memory is then freed
/// directly, uncounted.
class CachingAllocator : public Allocator {
 public:
  /// `capacity` 0: no limit but the host's. `max_cached_bytes`: the most the cache keeps.
  CachingAllocator(Device device, size_t capacity, size_t max_cached_bytes);
  ~CachingAllocator() override;
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  Device device() const override { return device_; }
  std::shared_ptr<Storage> allocate(size_t bytes) override;
  /// The most bytes that may be in use at once; 0 when unlimited.
  size_t capacity() const { return capacity_; }
  /// Bytes held in the cache, free for reuse.
  size_t cached_bytes() const;
  /// Returns every cached block to the system.
  void release_cached();

 private:
  struct Cache;  // shared with the deleters of the storage handed out
  void recycle(void* block, size_t rounded);
  const Device device_;
  const size_t capacity_;
  const size_t max_cached_bytes_;
  std::shared_ptr<Cache> cache_;
};

/// The bytes a CachingAllocator counts for a request of `bytes`: its size class, the request
/// rounded up to a multiple of 64 (64 for an empty one; less than `bytes` when that
/// overflows). placement/ estimates a pool's use with it.
size_t allocation_bytes(size_t bytes);

/// Host memory: no capacity but the machine's, a cache of up to `max_cached_bytes`.
class CpuAllocator final : public CachingAllocator {
 public:
  explicit CpuAllocator(size_t max_cached_bytes = size_t{1} << 30)
      : CachingAllocator(Device::cpu(), 0, max_cached_bytes) {}
};

/// The memory pool of one simulated GPU: `capacity` bytes, all of which may be cached. Its
/// blocks are host memory, but a pool apart from the CPU's, so each device's bytes are
/// counted on their own and each device runs out on its own.
class PoolAllocator final : public CachingAllocator {
 public:
  PoolAllocator(Device device, size_t capacity) : CachingAllocator(device, capacity, capacity) {}
};

/// The process-wide host allocator. Never destroyed, so that tensors that outlive main()
/// can still give their memory back.
CpuAllocator& cpu_allocator();

}  // namespace tandem
