#include "core/storage.h"

#include <cstdlib>
#include <new>
#include <string>

#include "core/error.h"

namespace tandem {

void Allocator::count_allocation(size_t bytes) {
  size_t now = current_.fetch_add(bytes) + bytes;
  size_t peak = peak_.load();
  while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
  }
}

namespace {

// Blocks round up to a cache line: the same shape always lands in the same size class,
// and no more than 63 bytes a block are spent on it.
size_t size_class(size_t bytes) {
  size_t rounded = (bytes + 63) / 64 * 64;
  return rounded == 0 ? 64 : rounded;
}

}  // namespace

CpuAllocator::~CpuAllocator() { release_cached(); }

std::shared_ptr<Storage> CpuAllocator::allocate(size_t bytes) {
  size_t rounded = size_class(bytes);
  void* data = nullptr;
  {
    std::lock_guard lock(mutex_);
    auto it = cached_.find(rounded);
    if (it != cached_.end()) {
      data = it->second;
      cached_.erase(it);
      cached_total_ -= rounded;
    }
  }
  if (data == nullptr) data = std::aligned_alloc(64, rounded);
  if (data == nullptr) {
    release_cached();
    data = std::aligned_alloc(64, rounded);
  }
  if (data == nullptr)
    throw UserError("out of memory on cpu: could not allocate " + std::to_string(bytes) + " bytes (" +
                    std::to_string(current_bytes()) + " bytes in use); try a smaller batch");
  count_allocation(rounded);
  return std::make_shared<Storage>(data, bytes, Device::cpu(), [this, rounded](void* p, size_t) {
    count_free(rounded);
    recycle(p, rounded);
  });
}

void CpuAllocator::recycle(void* block, size_t rounded) {
  {
    std::lock_guard lock(mutex_);
    if (cached_total_ + rounded <= max_cached_bytes_) {
      cached_.emplace(rounded, block);
      cached_total_ += rounded;
      return;
    }
  }
  std::free(block);
}

size_t CpuAllocator::cached_bytes() const {
  std::lock_guard lock(mutex_);
  return cached_total_;
}

void CpuAllocator::release_cached() {
  std::multimap<size_t, void*> blocks;
  {
    std::lock_guard lock(mutex_);
    blocks.swap(cached_);
    cached_total_ = 0;
  }
  for (auto& [size, block] : blocks) std::free(block);
}

CpuAllocator& cpu_allocator() {
  static CpuAllocator* allocator = new CpuAllocator();
  return *allocator;
}

}  // namespace tandem
