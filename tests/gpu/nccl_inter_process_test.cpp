// The CUDA backend's communicator between processes (backends/cuda/nccl_inter_process.h)
// within one process: one rank alone on one GPU, and, with two GPUs, two ranks (a thread
// each) summing, and one of them left alone in a collective until the watchdog aborts it.
// Between processes proper it runs under mpirun on a machine with several GPUs (the
// device tests of tests/distributed/test_distributed_cli.py, without --sim-gpus).
#include <chrono>
#include <cstdio>
#include <random>
#include <thread>

#include "gpu_test_util.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda_devices.h"

namespace tandem::test {
namespace {

std::unique_ptr<cuda::CudaBackend> backend_on(int gpu) {
  const std::vector<CudaDeviceInfo> gpus = cuda_devices();
  CudaGpuSpec spec;
  spec.gpu = gpus.at(static_cast<size_t>(gpu));
  spec.logical = gpu;
  for (size_t i = 0; i < gpus.size(); ++i) spec.physical_of_logical.push_back(static_cast<int>(i));
  return std::make_unique<cuda::CudaBackend>(spec);
}

InterProcessSetup setup_for(int rank, int size, const std::string& id, std::chrono::milliseconds timeout) {
  InterProcessSetup s;
  s.rank = rank;
  s.size = size;
  s.id = id;
  s.timeout = timeout;
  return s;
}

/// `t` (on `b`'s GPU) brought to the host, after everything queued on its compute lane.
Tensor to_host(cuda::CudaBackend& b, const Tensor& t) {
  b.synchronize();
  return to_cpu(t, b.context());
}

/// A fresh seed, printed for a replay.
uint32_t fresh_seed(const char* test) {
  const uint32_t seed = std::random_device{}();
  std::printf("%s: seed %u\n", test, seed);
  return seed;
}

/// Polls `done` for up to `limit`; whether it became true.
template <typename F>
bool within(std::chrono::milliseconds limit, F&& done) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

}  // namespace

TEST_CASE("one rank's NCCL communicator between processes sums and broadcasts on its GPU's stream",
          "[gpu][nccl][inter-process]") {
  auto b = backend_on(0);
  const std::string id = b->make_inter_process_id();
  REQUIRE(id.size() == 128);
  auto communicator = b->join_inter_process(setup_for(0, 1, id, std::chrono::seconds(30)));
  REQUIRE(communicator);
  std::mt19937 gen(fresh_seed("one rank's NCCL communicator"));
  Tensor x = random_tensor({1000}, gen), y = random_tensor({3, 5}, gen);
  std::vector<Tensor> bucket{to_gpu(x, b->context()), to_gpu(y, b->context())};
  Lane& lane = b->lane(LaneKind::compute);
  communicator->all_reduce_sum(lane, bucket, "a one-rank all-reduce");
  communicator->broadcast(lane, bucket[0], 0, "a one-rank broadcast");
  require_close(to_host(*b, bucket[0]), x, 0);  // the sum over one rank is itself
  require_close(to_host(*b, bucket[1]), y, 0);
  CHECK(within(std::chrono::seconds(5), [&] { return communicator->counters().collectives == 2; }));
  CHECK(communicator->counters().bytes == (1000 + 15 + 1000) * sizeof(float));
  CHECK(communicator->error().empty());
  // an id of another kind is refused, naming the device and the rank
  CHECK_THROWS_WITH(b->join_inter_process(setup_for(0, 1, "tandem simulated GPU communicator x", std::chrono::seconds(1))),
                    Catch::Contains("cuda:0 of rank 0") && Catch::Contains("not NCCL's"));
}

TEST_CASE("two ranks on two GPUs sum, and one left alone in a collective is aborted at its deadline",
          "[gpu][nccl][inter-process]") {
  if (cuda_devices().size() < 2) {
    WARN("one GPU: two ranks need two");
    return;
  }
  auto b0 = backend_on(0), b1 = backend_on(1);
  const std::string id = b0->make_inter_process_id();
  const auto timeout = std::chrono::seconds(2);
  std::unique_ptr<InterProcessCommunicator> c0, c1;
  // joining waits for every rank: one thread each
  std::thread other([&] { c1 = b1->join_inter_process(setup_for(1, 2, id, timeout)); });
  c0 = b0->join_inter_process(setup_for(0, 2, id, timeout));
  other.join();
  REQUIRE(c0);
  REQUIRE(c1);
  std::mt19937 gen(fresh_seed("two ranks on two GPUs"));
  Tensor x = random_tensor({4096}, gen), y = random_tensor({4096}, gen);
  std::vector<Tensor> on0{to_gpu(x, b0->context())}, on1{to_gpu(y, b1->context())};
  c0->all_reduce_sum(b0->lane(LaneKind::compute), on0, "the test's sum");
  c1->all_reduce_sum(b1->lane(LaneKind::compute), on1, "the test's sum");
  Tensor want = x.clone();
  for (int64_t i = 0; i < want.numel(); ++i) want.data<float>()[i] += y.data<float>()[i];
  require_close(to_host(*b0, on0[0]), want, 1e-6);
  require_close(to_host(*b1, on1[0]), want, 1e-6);

  // rank 1 never comes: the watchdog aborts rank 0's collective, and its stream goes on
  c0->all_reduce_sum(b0->lane(LaneKind::compute), on0, "the lonely sum");
  const auto started = std::chrono::steady_clock::now();
  REQUIRE(within(timeout + std::chrono::seconds(10), [&] { return !c0->error().empty(); }));
  CHECK(std::chrono::steady_clock::now() - started < timeout + std::chrono::seconds(5));
  CHECK_THAT(c0->error(), Catch::Contains("the lonely sum on cuda:0 did not finish within 2 s"));
  b0->synchronize();  // returns: NCCL's kernel was aborted
}

}  // namespace tandem::test
