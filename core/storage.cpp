#include "core/storage.h"

#include <algorithm>
#include <cstdlib>
#include <new>
#include <string>

#include <sys/mman.h>

#include "core/error.h"

namespace tandem {

Bf16Copy& Storage::bf16_copy() {
  if (Bf16Copy* made = find_bf16_copy()) return *made;
  auto fresh = std::make_unique<Bf16Copy>(bytes_ / sizeof(float));
  Bf16Copy* expected = nullptr;
  if (bf16_copy_.compare_exchange_strong(expected, fresh.get(), std::memory_order_acq_rel)) return *fresh.release();
  return *expected;  // another thread made it first
}

void Allocator::count_allocation(size_t bytes) {
  size_t now = current_.fetch_add(bytes) + bytes;
  size_t peak = peak_.load();
  while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
  }
}

// Blocks round up to a cache line: the same shape always lands in the same size class,
// and no more than 63 bytes a block are spent on it.
size_t allocation_bytes(size_t bytes) {
  size_t rounded = (bytes + 63) / 64 * 64;
  return rounded == 0 ? 64 : rounded;
}

// Note [huge pages for large blocks]: an embedding table's backward and update touch rows
// anywhere in megabytes, a TLB miss per row with 4 KiB pages; in 2 MiB pages a 12.8 MB
// table is 7 pages, whose translations stay cached (the bench recommender's item table:
// its stepped backward 0.78 -> 0.60 ms). So a block of 2 MiB or more starts on a 2 MiB
// boundary and asks for transparent huge pages, as PyTorch's CPU allocator does with
// THP_MEM_ALLOC_ENABLE. Only the advice: where THP is off, or "never", nothing changes.
constexpr size_t kHugePage = size_t{2} << 20;
void* allocate_block(size_t rounded) {
  if (rounded < kHugePage) return std::aligned_alloc(64, rounded);
  void* p = nullptr;
  if (::posix_memalign(&p, kHugePage, rounded) != 0) return nullptr;
  ::madvise(p, rounded, MADV_HUGEPAGE);  // advice: a failure changes nothing but speed
  return p;
}

// The cache lives apart from the allocator so that storage freed after the allocator is
// gone still finds a mutex to take; `owner` is then null and blocks go straight back.
struct CachingAllocator::Cache {
  std::mutex mutex;
  CachingAllocator* owner = nullptr;
  std::multimap<size_t, void*> blocks;  // rounded size -> block
  size_t total = 0;
};

CachingAllocator::CachingAllocator(Device device, size_t capacity, size_t max_cached_bytes)
    : device_(device), capacity_(capacity), max_cached_bytes_(max_cached_bytes), cache_(std::make_shared<Cache>()) {
  cache_->owner = this;
}

CachingAllocator::~CachingAllocator() {
  std::multimap<size_t, void*> blocks;
  {
    std::lock_guard lock(cache_->mutex);
    cache_->owner = nullptr;
    blocks.swap(cache_->blocks);
    cache_->total = 0;
  }
  for (auto& [size, block] : blocks) std::free(block);
}

std::shared_ptr<Storage> CachingAllocator::allocate(size_t bytes) {
  size_t rounded = allocation_bytes(bytes);
  if (rounded < bytes) throw OutOfMemory(device_, bytes, current_bytes(), capacity_);  // wrapped around
  void* data = nullptr;
  {
    // Counting happens under the cache's lock, so that in use plus cached stays within the
    // capacity however many threads allocate and free at once.
    std::lock_guard lock(cache_->mutex);
    auto it = cache_->blocks.find(rounded);
    if (it != cache_->blocks.end()) {
      data = it->second;
      cache_->blocks.erase(it);
      cache_->total -= rounded;
    } else if (capacity_ > 0) {
      if (current_bytes() + cache_->total + rounded > capacity_) {
        for (auto& [size, block] : cache_->blocks) std::free(block);
        cache_->blocks.clear();
        cache_->total = 0;
      }
      if (rounded > capacity_ - std::min(capacity_, current_bytes()))
        throw OutOfMemory(device_, bytes, current_bytes(), capacity_);
    }
    count_allocation(rounded);  // reserves the bytes before the system is asked for them
  }
  if (data == nullptr) data = allocate_block(rounded);
  if (data == nullptr) {
    release_cached();
    data = allocate_block(rounded);
  }
  if (data == nullptr) {
    std::lock_guard lock(cache_->mutex);
    count_free(rounded);
    throw OutOfMemory(device_, bytes, current_bytes(), capacity_);
  }
  std::shared_ptr<Cache> cache = cache_;
  return std::make_shared<Storage>(data, bytes, device_, [cache, rounded](void* p, size_t) {
    std::lock_guard lock(cache->mutex);
    if (cache->owner == nullptr) {
      std::free(p);
      return;
    }
    cache->owner->count_free(rounded);
    cache->owner->recycle(p, rounded);
  });
}

// Called with the cache's lock held.
void CachingAllocator::recycle(void* block, size_t rounded) {
  if (cache_->total + rounded <= max_cached_bytes_) {
    cache_->blocks.emplace(rounded, block);
    cache_->total += rounded;
    return;
  }
  std::free(block);
}

size_t CachingAllocator::cached_bytes() const {
  std::lock_guard lock(cache_->mutex);
  return cache_->total;
}

void CachingAllocator::release_cached() {
  std::multimap<size_t, void*> blocks;
  {
    std::lock_guard lock(cache_->mutex);
    blocks.swap(cache_->blocks);
    cache_->total = 0;
  }
  for (auto& [size, block] : blocks) std::free(block);
}

CpuAllocator& cpu_allocator() {
  static CpuAllocator* allocator = new CpuAllocator();
  return *allocator;
}

}  // namespace tandem
