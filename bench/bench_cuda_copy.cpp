// Host-to-device and device-to-host bandwidth of Tandem's copy path (backends/cuda/copies.h)
// against a bare cudaMemcpyAsync from pinned memory, the fastest a copy can be, in one run:
//   - pinned:  copy_to_device_async / copy_to_host_async from and into pinned memory, the
//              path the runtime's crossings take (a host tensor that crosses to or from a
//              GPU is allocated in pinned memory: Schedule::allocator_for); should
//              equal the bare call. "h2d_ratio" and "d2h_ratio" are this path's;
//   - staged:  copy_to_device / copy_to_host from ordinary (pageable) memory, as a tensor a
//              caller hands in is; pinned chunks, pipelined ("staged_*_ratio"), beside the
//              driver's own copy from pageable memory (cudaMemcpyAsync on it, "driver_*");
//   - peer:    copy_peer between GPU 0 and GPU 1 when there are two.
// One JSON object per line; a ratio is Tandem's bandwidth over the bare call's.
//
//   build/bench/bench_cuda_copy            (exits 77 with "no GPU" on a machine without one)
#include <chrono>
#include <cstring>
#include <vector>

#include "backends/cuda/copies.h"
#include "backends/cuda/cuda_context.h"
#include "cuda_bench_util.h"

using namespace tandem;

int main() {
  bench::require_gpu("bench_cuda_copy");
  cuda::CudaContext ctx(0);
  cuda::Stream& stream = ctx.copy_in_stream();
  for (size_t bytes : {size_t{1} << 20, size_t{16} << 20, size_t{256} << 20}) {
    std::vector<char> pageable(bytes, 1);
    cuda::PinnedBuffer pinned = cuda::PinnedPool::shared().acquire(bytes);
    std::memset(pinned.data(), 1, bytes);
    auto device = ctx.allocator().allocate(bytes);
    const int reps = bytes > (size_t{64} << 20) ? 3 : 10;
    auto gbps = [&](double s) { return static_cast<double>(bytes) / s / 1e9; };
    const double bare_h2d = bench::seconds_per_call(stream, reps, 5, [&](cudaStream_t s) {
      TANDEM_CUDA_CHECK(cudaMemcpyAsync(device->data(), pinned.data(), bytes, cudaMemcpyHostToDevice, s));
    });
    const double pinned_h2d = bench::seconds_per_call(
        stream, reps, 5, [&](cudaStream_t s) { cuda::copy_to_device_async(device->data(), pinned.data(), bytes, s); });
    // The staged copy spends host time (memcpy into pinned chunks) while it queues: time it
    // end to end on the host clock, through the wait for the stream.
    auto host_seconds = [&](auto&& copy) {
      copy();
      stream.synchronize();
      double best = 1e30;
      for (int t = 0; t < 5; ++t) {
        auto start = std::chrono::steady_clock::now();
        for (int r = 0; r < reps; ++r) copy();
        stream.synchronize();
        best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / reps);
      }
      return best;
    };
    const double staged_h2d =
        host_seconds([&] { cuda::copy_to_device(device->data(), pageable.data(), bytes, stream.get()); });
    const double driver_h2d = host_seconds([&] {
      TANDEM_CUDA_CHECK(cudaMemcpyAsync(device->data(), pageable.data(), bytes, cudaMemcpyHostToDevice, stream.get()));
    });
    const double bare_d2h = bench::seconds_per_call(stream, reps, 5, [&](cudaStream_t s) {
      TANDEM_CUDA_CHECK(cudaMemcpyAsync(pinned.data(), device->data(), bytes, cudaMemcpyDeviceToHost, s));
    });
    const double pinned_d2h = bench::seconds_per_call(
        stream, reps, 5, [&](cudaStream_t s) { cuda::copy_to_host_async(pinned.data(), device->data(), bytes, s); });
    const double staged_d2h =
        host_seconds([&] { cuda::copy_to_host(pageable.data(), device->data(), bytes, stream.get()); });
    const double driver_d2h = host_seconds([&] {
      TANDEM_CUDA_CHECK(cudaMemcpyAsync(pageable.data(), device->data(), bytes, cudaMemcpyDeviceToHost, stream.get()));
    });
    std::printf("{\"bench\": \"cuda_copy\", \"bytes\": %zu, \"bare_pinned_h2d_gbps\": %.2f, "
                "\"tandem_pinned_h2d_gbps\": %.2f, \"h2d_ratio\": %.3f, \"tandem_staged_h2d_gbps\": %.2f, "
                "\"staged_h2d_ratio\": %.3f, \"driver_pageable_h2d_gbps\": %.2f, "
                "\"bare_pinned_d2h_gbps\": %.2f, \"tandem_pinned_d2h_gbps\": %.2f, \"d2h_ratio\": %.3f, "
                "\"tandem_staged_d2h_gbps\": %.2f, \"staged_d2h_ratio\": %.3f, \"driver_pageable_d2h_gbps\": %.2f}\n",
                bytes, gbps(bare_h2d), gbps(pinned_h2d), bare_h2d / pinned_h2d, gbps(staged_h2d), bare_h2d / staged_h2d,
                gbps(driver_h2d), gbps(bare_d2h), gbps(pinned_d2h), bare_d2h / pinned_d2h, gbps(staged_d2h),
                bare_d2h / staged_d2h, gbps(driver_d2h));
  }
  if (tandem::cuda_devices().size() >= 2) {
    cuda::CudaContext other(1);
    const size_t bytes = size_t{256} << 20;
    auto a = ctx.allocator().allocate(bytes), b = other.allocator().allocate(bytes);
    const bool direct = cuda::enable_peer_access(1, 0) && cuda::enable_peer_access(0, 1);
    const double peer = bench::seconds_per_call(
        ctx.stream(), 3, 5, [&](cudaStream_t s) { cuda::copy_peer(b->data(), 1, a->data(), 0, bytes, s); });
    std::printf("{\"bench\": \"cuda_copy_peer\", \"bytes\": %zu, \"peer_access\": %s, \"gbps\": %.2f}\n", bytes,
                direct ? "true" : "false", static_cast<double>(bytes) / peer / 1e9);
  }
  return 0;
}
