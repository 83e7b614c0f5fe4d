// Per-device memory pools: capacity, out-of-memory errors, cache release, separate counts.
#include <catch2/catch.hpp>

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "backends/sim/sim_gpu.h"
#include "core/error.h"
#include "core/storage.h"

using namespace tandem;

namespace {
constexpr size_t MiB = size_t{1} << 20;
}

TEST_CASE("a pool that runs out throws OutOfMemory naming the device and what to do", "[pool]") {
  PoolAllocator pool(Device::cuda(1), 2048 * MiB);
  auto held = pool.allocate(1990 * MiB);
  try {
    pool.allocate(96 * MiB);
    FAIL("no error");
  } catch (const OutOfMemory& e) {
    CHECK(e.device == Device::cuda(1));
    CHECK(e.requested == 96 * MiB);
    CHECK(e.in_use == 1990 * MiB);
    CHECK(e.capacity == 2048 * MiB);
    CHECK(std::string(e.what()) ==
          "out of memory on cuda:1: asked for 96.0 MiB with 1.9 GiB of 2.0 GiB in use (58.0 MiB free); try a smaller "
          "batch (--batch) "
          "or place fewer layers on cuda:1 (--place / placement:)");
    OutOfMemory with_layer = e.in("layer 'fc' (linear)");
    CHECK_THAT(with_layer.what(), Catch::StartsWith("layer 'fc' (linear): out of memory on cuda:1: asked for 96.0 MiB"));
    CHECK(with_layer.requested == e.requested);
  }
  // A UserError, so the CLI exits with code 2; the pool is unchanged.
  CHECK_THROWS_AS(pool.allocate(200 * MiB), UserError);
  CHECK(pool.current_bytes() == 1990 * MiB);
  held.reset();
  CHECK(pool.current_bytes() == 0);
  CHECK_NOTHROW(pool.allocate(200 * MiB));
}

TEST_CASE("a pool releases its cache before it gives up", "[pool]") {
  PoolAllocator pool(Device::cuda(0), 10 * MiB);
  { auto a = pool.allocate(4 * MiB), b = pool.allocate(4 * MiB); }
  CHECK(pool.current_bytes() == 0);
  CHECK(pool.cached_bytes() == 8 * MiB);
  // 6 MiB does not fit beside the 8 MiB cached; the cache goes, the request fits.
  auto c = pool.allocate(6 * MiB);
  CHECK(pool.cached_bytes() == 0);
  CHECK(pool.current_bytes() == 6 * MiB);
  { auto d = pool.allocate(2 * MiB); }
  CHECK(pool.cached_bytes() == 2 * MiB);
  // Too large even with an empty cache: the cache is released all the same, then the error.
  CHECK_THROWS_AS(pool.allocate(5 * MiB), OutOfMemory);
  CHECK(pool.cached_bytes() == 0);
  CHECK(pool.current_bytes() == 6 * MiB);
}

TEST_CASE("each device counts its own current and peak bytes in 64-byte classes", "[pool]") {
  SimGpu a(0, 64 * MiB), b(1, 64 * MiB);
  CpuAllocator cpu(1 << 24);
  auto on_a = a.allocator().allocate(1000);  // 1024 in 64-byte classes
  auto on_b1 = b.allocator().allocate(3 * MiB);
  auto on_cpu = cpu.allocate(5 * MiB);
  CHECK(on_a->device() == Device::cuda(0));
  CHECK(on_b1->device() == Device::cuda(1));
  CHECK(reinterpret_cast<uintptr_t>(on_a->data()) % 64 == 0);
  CHECK(on_a->bytes() == 1000);
  CHECK(a.allocator().current_bytes() == 1024);
  CHECK(b.allocator().current_bytes() == 3 * MiB);
  CHECK(cpu.current_bytes() == 5 * MiB);
  on_b1.reset();
  auto on_b2 = b.allocator().allocate(MiB);
  CHECK(b.allocator().current_bytes() == MiB);
  CHECK(b.allocator().peak_bytes() == 3 * MiB);
  CHECK(a.allocator().peak_bytes() == 1024);
  CHECK(cpu.peak_bytes() == 5 * MiB);
}

TEST_CASE("a pool never goes over its capacity under concurrent use", "[pool]") {
  PoolAllocator pool(Device::cuda(0), 8 * MiB);
  std::vector<std::thread> threads;
  std::atomic<int> refused{0};
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 200; ++i) {
        try {
          auto s = pool.allocate(MiB * (1 + (i % 3)));  // no CHECK here: Catch2 is not thread-safe
        } catch (const OutOfMemory&) {
          refused.fetch_add(1);
        }
      }
    });
  for (auto& t : threads) t.join();
  CHECK(pool.current_bytes() == 0);
  CHECK(pool.peak_bytes() <= 8 * MiB);
}

TEST_CASE("storage may outlive its pool", "[pool]") {
  std::shared_ptr<Storage> survivor;
  {
    PoolAllocator pool(Device::cuda(0), MiB);
    survivor = pool.allocate(1024);
  }
  survivor.reset();  // frees the block directly; nothing to count
  SUCCEED();
}
