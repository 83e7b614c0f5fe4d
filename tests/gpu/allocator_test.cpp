// The caching allocator of a GPU: reuse by size class, per-stream reuse and the events
// that hold back a block used on another stream, current and peak bytes, the capacity and
// out-of-memory errors.
#include <atomic>

#include "gpu_test_util.h"
#include "backends/cuda/size_class.h"

namespace tandem::test {
namespace {

using cuda::CudaAllocator;

TEST_CASE("a freed block is reused by the next request of its size class", "[gpu][allocator]") {
  cuda::Stream stream(0);
  CudaAllocator alloc(Device::cuda(0), 0, stream.get());
  auto a = alloc.allocate(1000);
  void* first = a->data();
  CHECK(alloc.current_bytes() == cuda::size_class(1000));
  a.reset();
  CHECK(alloc.current_bytes() == 0);
  CHECK(alloc.stats().cached_bytes == cuda::size_class(1000));
  auto b = alloc.allocate(900);  // the same class (1024)
  CHECK(b->data() == first);
  CHECK(alloc.stats().device_allocations == 1);
  CHECK(alloc.stats().cache_hits == 1);
  auto c = alloc.allocate(5000);  // another class: a new block
  CHECK(c->data() != first);
  CHECK(alloc.stats().device_allocations == 2);
}

TEST_CASE("current and peak bytes count blocks in use by size class", "[gpu][allocator]") {
  cuda::Stream stream(0);
  CudaAllocator alloc(Device::cuda(0), 0, stream.get());
  auto a = alloc.allocate(1 << 20);
  auto b = alloc.allocate(3 << 20);
  const size_t both = cuda::size_class(1 << 20) + cuda::size_class(3 << 20);
  CHECK(alloc.current_bytes() == both);
  b.reset();
  CHECK(alloc.current_bytes() == cuda::size_class(1 << 20));
  CHECK(alloc.peak_bytes() == both);
  alloc.reset_peak();
  CHECK(alloc.peak_bytes() == cuda::size_class(1 << 20));
  alloc.release_cached();
  CHECK(alloc.stats().cached_bytes == 0);
  CHECK(alloc.stats().device_frees == 1);
}

TEST_CASE("blocks are reused on the stream they were allocated for", "[gpu][allocator]") {
  cuda::Stream s1(0), s2(0);
  CudaAllocator alloc(Device::cuda(0), 0, s1.get());
  void* first = alloc.allocate(4096, s1.get())->data();  // freed at once, cached for s1
  auto other = alloc.allocate(4096, s2.get());
  CHECK(other->data() != first);  // not handed to another stream's work
  auto same = alloc.allocate(4096, s1.get());
  CHECK(same->data() == first);
}

TEST_CASE("a block used on another stream waits for that stream's work before reuse", "[gpu][allocator]") {
  cuda::Stream s1(0), s2(0);
  CudaAllocator alloc(Device::cuda(0), 0, s1.get());
  // A host function that blocks s2 until released stands for a long kernel on s2.
  static std::atomic<bool> released;
  released = false;
  REQUIRE(cudaLaunchHostFunc(
              s2.get(), [](void*) { while (!released.load()) {} }, nullptr) == cudaSuccess);
  auto block = alloc.allocate(8192, s1.get());
  void* ptr = block->data();
  alloc.record_stream(*block, s2.get());
  block.reset();
  CHECK(alloc.stats().pending_bytes == cuda::size_class(8192));
  auto while_busy = alloc.allocate(8192, s1.get());
  CHECK(while_busy->data() != ptr);  // s2 may still use it
  released = true;
  s2.synchronize();
  auto after = alloc.allocate(8192, s1.get());
  CHECK(after->data() == ptr);
  CHECK(alloc.stats().pending_bytes == 0);
}

TEST_CASE("the capacity bounds in use plus cached, and running out is an OutOfMemory", "[gpu][allocator][errors]") {
  cuda::Stream stream(0);
  CudaAllocator alloc(Device::cuda(0), 0, stream.get(), size_t{1} << 20);
  auto a = alloc.allocate(600 << 10);
  REQUIRE_THROWS_AS(alloc.allocate(600 << 10), OutOfMemory);
  REQUIRE_THROWS_WITH(alloc.allocate(600 << 10), Catch::Contains("out of memory on cuda:0"));
  a.reset();  // cached; a request of another class gives the cache back first
  auto b = alloc.allocate(700 << 10);
  CHECK(alloc.stats().device_frees == 1);
  CHECK(alloc.stats().cached_bytes == 0);
}

TEST_CASE("asking for more than the GPU has is an OutOfMemory, not a crash", "[gpu][allocator][errors]") {
  cuda::Stream stream(0);
  CudaAllocator alloc(Device::cuda(0), 0, stream.get());
  REQUIRE_THROWS_AS(alloc.allocate(size_t{1} << 50), OutOfMemory);
  auto fine = alloc.allocate(1024);  // the allocator still works
  CHECK(fine->device() == Device::cuda(0));
}

TEST_CASE("storage outliving its allocator is freed directly", "[gpu][allocator]") {
  cuda::Stream stream(0);
  std::shared_ptr<Storage> survivor;
  {
    CudaAllocator alloc(Device::cuda(0), 0, stream.get());
    survivor = alloc.allocate(4096);
  }
  survivor.reset();  // must not touch the destroyed allocator
  SUCCEED();
}

}  // namespace
}  // namespace tandem::test
