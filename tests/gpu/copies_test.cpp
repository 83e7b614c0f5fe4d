// Copies between the host and a GPU, staged and pinned, ordered across streams by
// events, and between GPUs.
#include <cstring>
#include <numeric>

#include "gpu_test_util.h"
#include "backends/cuda_devices.h"

namespace tandem::test {
namespace {

std::vector<unsigned char> pattern(size_t bytes, unsigned seed) {
  std::vector<unsigned char> v(bytes);
  std::mt19937 gen(seed);
  for (auto& b : v) b = static_cast<unsigned char>(gen());
  return v;
}

TEST_CASE("staged copies round-trip pageable memory of any size", "[gpu][copies]") {
  cuda::CudaContext& ctx = gpu();
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{1000}, cuda::kStagingChunkBytes + 3,
                       2 * cuda::kStagingChunkBytes + cuda::kStagingChunkBytes / 2 + 5}) {
    INFO(bytes << " bytes");
    std::vector<unsigned char> host = pattern(bytes, static_cast<unsigned>(bytes)), back(bytes, 0);
    auto device = ctx.allocator().allocate(std::max<size_t>(bytes, 1));
    cuda::copy_to_device(device->data(), host.data(), bytes, ctx.copy_in_stream().get());
    std::fill(host.begin(), host.end(), 0);  // the source is free on return
    ctx.stream().wait(ctx.copy_in_stream());
    cuda::copy_to_host(back.data(), device->data(), bytes, ctx.stream().get());
    CHECK(back == pattern(bytes, static_cast<unsigned>(bytes)));
  }
}

TEST_CASE("staging buffers are reused across copies", "[gpu][copies]") {
  cuda::PinnedPool pool;
  cuda::CudaContext& ctx = gpu();
  std::vector<unsigned char> host = pattern(3 << 20, 1), back(3 << 20);
  auto device = ctx.allocator().allocate(host.size());
  for (int i = 0; i < 4; ++i) {
    cuda::copy_to_device(device->data(), host.data(), host.size(), ctx.stream().get(), pool);
    cuda::copy_to_host(back.data(), device->data(), back.size(), ctx.stream().get(), pool);
  }
  CHECK(back == host);
  CHECK(pool.stats().allocations <= 3);  // a few buffers in flight at most, then reuse
  CHECK(pool.stats().reuses >= 5);
}

TEST_CASE("pinned buffers held in use do not make staging buffers be pinned again", "[gpu][copies]") {
  cuda::PinnedPool pool(size_t{16} << 20);
  cuda::PinnedBuffer held = pool.acquire(size_t{32} << 20);  // in use, and over the cache's limit alone
  cuda::CudaContext& ctx = gpu();
  std::vector<unsigned char> host = pattern(12 << 20, 7), back(12 << 20);
  auto device = ctx.allocator().allocate(host.size());
  for (int i = 0; i < 4; ++i) {
    cuda::copy_to_device(device->data(), host.data(), host.size(), ctx.stream().get(), pool);
    cuda::copy_to_host(back.data(), device->data(), back.size(), ctx.stream().get(), pool);
  }
  CHECK(back == host);
  CHECK(pool.stats().allocations <= 4);  // the held buffer and a few chunks, then reuse
}

TEST_CASE("pinned memory copies asynchronously, ordered by an event", "[gpu][copies]") {
  cuda::CudaContext& ctx = gpu();
  const size_t bytes = 1 << 20;
  cuda::PinnedBuffer in = cuda::PinnedPool::shared().acquire(bytes), out = cuda::PinnedPool::shared().acquire(bytes);
  CHECK(cuda::is_pinned(in.data()));
  std::vector<unsigned char> want = pattern(bytes, 3);
  std::memcpy(in.data(), want.data(), bytes);
  std::memset(out.data(), 0, bytes);
  auto device = ctx.allocator().allocate(bytes);
  cuda::copy_to_device_async(device->data(), in.data(), bytes, ctx.copy_in_stream().get());
  ctx.copy_out_stream().wait(ctx.copy_in_stream().record());
  cuda::copy_to_host_async(out.data(), device->data(), bytes, ctx.copy_out_stream().get());
  ctx.copy_out_stream().synchronize();
  CHECK(std::memcmp(out.data(), want.data(), bytes) == 0);
  std::vector<unsigned char> pageable(16);
  CHECK_FALSE(cuda::is_pinned(pageable.data()));
}

TEST_CASE("tensors go to a GPU and back unchanged", "[gpu][copies]") {
  std::mt19937 gen(5);
  Tensor t = random_tensor({37, 129}, gen);
  Tensor on_gpu = to_gpu(t);
  CHECK(on_gpu.device() == Device::cuda(0));
  Tensor back = to_cpu(on_gpu);
  CHECK(back.to_vector<float>() == t.to_vector<float>());
  Tensor ints = random_indices({1000}, 1 << 30, gen);
  CHECK(to_cpu(to_gpu(ints)).to_vector<int64_t>() == ints.to_vector<int64_t>());
}

TEST_CASE("peer copies between every pair of GPUs round-trip", "[gpu][copies][multi]") {
  const int n = static_cast<int>(cuda_devices().size());
  if (n < 2) WARN("one GPU: only the same-device path of copy_peer runs");
  std::vector<std::unique_ptr<cuda::CudaContext>> contexts;
  for (int d = 0; d < n; ++d) contexts.push_back(std::make_unique<cuda::CudaContext>(d));
  const size_t bytes = (5 << 20) + 7;
  std::vector<unsigned char> want = pattern(bytes, 9), back(bytes);
  for (int src = 0; src < n; ++src)
    for (int dst = 0; dst < n; ++dst) {
      INFO("cuda:" << src << " -> cuda:" << dst << (cuda::enable_peer_access(dst, src) ? " (peer access)" : ""));
      cuda::CudaContext& s = *contexts[src];
      cuda::CudaContext& d = *contexts[dst];
      auto a = s.allocator().allocate(bytes), b = d.allocator().allocate(bytes);
      cuda::copy_to_device(a->data(), want.data(), bytes, s.stream().get());
      cuda::copy_peer(b->data(), dst, a->data(), src, bytes, s.stream().get());
      s.stream().synchronize();
      std::fill(back.begin(), back.end(), 0);
      cuda::copy_to_host(back.data(), b->data(), bytes, d.stream().get());
      CHECK(back == want);
    }
}

}  // namespace
}  // namespace tandem::test
