// The host allocator: alignment, byte accounting, and reuse of freed blocks.
#include <catch2/catch.hpp>

#include <cstdint>

#include "core/storage.h"
#include "core/tensor.h"

using namespace tandem;

TEST_CASE("freed host blocks are reused for the same size and counted", "[allocator]") {
  CpuAllocator allocator(1 << 24);
  void* first = nullptr;
  {
    auto a = allocator.allocate(1 << 20);
    first = a->data();
    CHECK(reinterpret_cast<uintptr_t>(first) % 64 == 0);
    CHECK(allocator.current_bytes() == (1 << 20));
    CHECK(allocator.cached_bytes() == 0);
  }
  CHECK(allocator.current_bytes() == 0);
  CHECK(allocator.cached_bytes() == (1 << 20));
  {
    auto again = allocator.allocate((1 << 20) - 10);  // same size class (64-byte units)
    CHECK(again->data() == first);
    CHECK(allocator.cached_bytes() == 0);
    auto other = allocator.allocate(1 << 12);
    CHECK(other->data() != first);
    CHECK(allocator.peak_bytes() == (1 << 20) + (1 << 12));
  }
  allocator.release_cached();
  CHECK(allocator.cached_bytes() == 0);
}

TEST_CASE("the cache stays within its limit", "[allocator]") {
  CpuAllocator allocator(1 << 16);
  { auto big = allocator.allocate(1 << 20); }
  CHECK(allocator.cached_bytes() == 0);  // larger than the whole cache: freed at once
  { auto small = allocator.allocate(1 << 12); }
  CHECK(allocator.cached_bytes() == (1 << 12));
}

TEST_CASE("tensors larger than the machine could hold are refused with a message", "[allocator]") {
  REQUIRE_THROWS_WITH(Tensor::empty({int64_t{1} << 40, 1024}, DType::float32), Catch::Contains("larger than 1 TiB"));
  REQUIRE_THROWS_WITH(Tensor::empty({int64_t{1} << 62, 1 << 20}, DType::float32), Catch::Contains("too many elements"));
}
