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

std::shared_ptr<Storage> CpuAllocator::allocate(size_t bytes) {
  constexpr size_t alignment = 64;
  size_t rounded = (bytes + alignment - 1) / alignment * alignment;
  if (rounded == 0) rounded = alignment;
  void* data = std::aligned_alloc(alignment, rounded);
  if (data == nullptr)
    throw UserError("out of memory on cpu: could not allocate " + std::to_string(bytes) + " bytes (" +
                    std::to_string(current_bytes()) + " bytes in use); try a smaller batch");
  count_allocation(rounded);
  return std::make_shared<Storage>(data, bytes, Device::cpu(), [this, rounded](void* p, size_t) {
    std::free(p);
    count_free(rounded);
  });
}

CpuAllocator& cpu_allocator() {
  static CpuAllocator allocator;
  return allocator;
}

}  // namespace tandem
