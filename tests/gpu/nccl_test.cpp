// All-reduce and broadcast over the GPUs present: through NCCL when the devices are
// distinct, through device-local copies and adds when logical devices share a GPU; the
// communicators of a device set are made once.
#include "gpu_test_util.h"
#include "backends/cuda_devices.h"
#include "backends/cuda/nccl_comms.h"

namespace tandem::test {
namespace {

/// Contexts on the given physical devices (repeats make logical devices sharing a GPU).
std::vector<std::unique_ptr<cuda::CudaContext>> contexts_on(const std::vector<int>& devices) {
  std::vector<std::unique_ptr<cuda::CudaContext>> out;
  for (size_t i = 0; i < devices.size(); ++i)
    out.push_back(std::make_unique<cuda::CudaContext>(Device::cuda(static_cast<int>(i)), devices[i]));
  return out;
}

/// Participant i holds (i + 1) * base; returns the buffers and their host values.
struct Participants {
  std::vector<Tensor> tensors;
  std::vector<cuda::CollectiveBuffer> buffers;
};

Participants fill(std::vector<std::unique_ptr<cuda::CudaContext>>& contexts, const Tensor& base) {
  Participants p;
  for (size_t i = 0; i < contexts.size(); ++i) {
    Tensor host = base.clone();
    for (float& v : host.span<float>()) v *= static_cast<float>(i + 1);
    p.tensors.push_back(to_gpu(host, *contexts[i]));
    p.buffers.push_back({contexts[i].get(), p.tensors.back().data<float>(), nullptr});
  }
  return p;
}

void check_all_reduce(const std::vector<int>& devices) {
  INFO("devices " << shape_str(std::vector<int64_t>(devices.begin(), devices.end())));
  auto contexts = contexts_on(devices);
  std::mt19937 gen(11);
  Tensor base = random_tensor({(1 << 20) + 3}, gen);
  Participants p = fill(contexts, base);
  cuda::NcclCache cache;
  cuda::all_reduce_sum(p.buffers, base.numel(), cache);
  const float factor = static_cast<float>(devices.size() * (devices.size() + 1) / 2);
  Tensor want = base.clone();
  for (float& v : want.span<float>()) v *= factor;
  for (size_t i = 0; i < contexts.size(); ++i) {
    INFO("participant " << i);
    require_close(to_cpu(p.tensors[i], *contexts[i]), want, 1e-6);
  }
  cuda::all_reduce_sum(p.buffers, base.numel(), cache);  // again: no new communicators
  CHECK(cache.groups_made() == (cuda::nccl_can_serve(p.buffers) && devices.size() > 1 ? 1u : 0u));
}

TEST_CASE("all-reduce sums over every GPU present", "[gpu][nccl]") {
  const int n = static_cast<int>(cuda_devices().size());
  std::vector<int> all(n);
  for (int i = 0; i < n; ++i) all[i] = i;
  if (n == 1) WARN("one GPU: NCCL runs on a single device only");
  check_all_reduce(all);
}

TEST_CASE("all-reduce over logical devices sharing a GPU does not call NCCL with a device twice", "[gpu][nccl]") {
  check_all_reduce({0, 0});
  check_all_reduce({0, 0, 0});
  if (cuda_devices().size() >= 2) check_all_reduce({0, 1, 0});
}

TEST_CASE("broadcast copies the root's buffer to every participant", "[gpu][nccl]") {
  const int n = static_cast<int>(cuda_devices().size());
  for (std::vector<int> devices : {std::vector<int>{0, 0}, n >= 2 ? std::vector<int>{0, 1} : std::vector<int>{0}}) {
    INFO("devices " << devices.size());
    auto contexts = contexts_on(devices);
    std::mt19937 gen(12);
    Tensor base = random_tensor({4097}, gen);
    Participants p = fill(contexts, base);
    const size_t root = devices.size() - 1;
    cuda::NcclCache cache;
    cuda::broadcast(p.buffers, base.numel(), root, cache);
    Tensor want = base.clone();
    for (float& v : want.span<float>()) v *= static_cast<float>(root + 1);
    for (size_t i = 0; i < contexts.size(); ++i) require_close(to_cpu(p.tensors[i], *contexts[i]), want, 0.0);
  }
}

}  // namespace
}  // namespace tandem::test
