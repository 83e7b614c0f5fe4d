// Host tensors that a copy moves to or from a GPU live in that GPU's host memory
// (Backend::host_allocator: pinned memory for CUDA), so each crossing is one asynchronous
// transfer instead of a memcpy through a staging buffer: a cpu layer's output that a GPU
// reads, and a GPU's output or gradient that lands on the cpu. A stand-in GPU with host
// memory of its own shows where the runtime allocated them, and the numbers stay the cpu's.
#include <catch2/catch.hpp>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

#include "../support/fresh_seed.h"
#include "runtime/data/dataset.h"
#include "runtime/trainer.h"
#include "../support/scoped_env.h"
#include "multidevice_support.h"
#include "sim_gpu_stand_in.h"

using namespace tandem;
using namespace tandem::testing;

namespace {

/// The host's memory, counting every byte handed out (peaks would hide a tensor freed
/// before the next crossing's is allocated).
class CountingHostMemory final : public Allocator {
 public:
  Device device() const override { return Device::cpu(); }
  std::shared_ptr<Storage> allocate(size_t bytes) override {
    handed_out += bytes;
    return cpu_allocator().allocate(bytes);
  }
  std::atomic<size_t> handed_out{0};
};

class GpuWithHostMemory final : public SimGpuStandIn {
 public:
  using SimGpuStandIn::SimGpuStandIn;
  Allocator& host_allocator() override { return host_memory; }
  CountingHostMemory host_memory;
};

// cpu embedding -> linear on cuda:0 -> linear on the cpu, loss on the cpu: a crossing each way,
// forward and backward
std::string model_yaml(const std::string& tag = "") {
  std::string path = (std::filesystem::temp_directory_path() /
                      ("tandem_host_memory_" + tag + std::to_string(getpid()) + ".yaml")).string();
  std::ofstream(path) << R"(name: host_memory
inputs:
  tokens: {shape: [batch], dtype: int64}
targets:
  label: {shape: [batch], dtype: int64}
layers:
  - {name: embedding, op: embedding, num_embeddings: 500, embedding_dim: 24, device: cpu}
  - {name: middle, op: linear, in_features: 24, out_features: 40, device: cuda:0}
  - {name: head, op: linear, in_features: 40, out_features: 7, device: cpu}
loss: {op: cross_entropy, input: head, target: label}
train:
  batch: 16
  optimizer: {name: sgd, lr: 0.1}
)";
  return path;
}

/// A registry whose one GPU is a GpuWithHostMemory, set in `gpu` when opened.
std::shared_ptr<DeviceRegistry> registry_with(GpuWithHostMemory*& gpu) {
  return std::make_shared<DeviceRegistry>(
      DeviceOptions{.sim_gpus = 0, .sim_gpu_memory = std::nullopt}, std::vector<CudaDeviceInfo>{fake_gpu(0)},
      std::string(), [&gpu](const CudaGpuSpec& spec) -> std::unique_ptr<Backend> {
        auto backend = std::make_unique<GpuWithHostMemory>(spec.logical);
        gpu = backend.get();
        return backend;
      });
}

/// The model on the cpu (the reference) and placed over a GpuWithHostMemory (set in `gpu`),
/// with the same weights.
struct TwoModels {
  Model reference, placed;
};
TwoModels load_both(const std::string& yaml, uint32_t seed, GpuWithHostMemory*& gpu) {
  TwoModels m{Model::load(yaml), Model::load(yaml)};
  m.reference.to(Device::cpu());
  m.reference.init_parameters(seed);
  m.placed.init_parameters(seed);
  m.placed.use_devices(registry_with(gpu), policy());
  return m;
}

}  // namespace

TEST_CASE("tensors crossing between the cpu and a GPU are allocated in that GPU's host memory", "[multidevice][copies]") {
  ScopedEnv no_sims("TANDEM_SIM_GPUS", nullptr);
  GpuWithHostMemory* gpu = nullptr;
  const std::string yaml = model_yaml();
  const uint32_t seed = fresh_seed();
  INFO("seed " << seed);
  TwoModels both = load_both(yaml, seed, gpu);
  Model &reference = both.reference, &model = both.placed;

  const int64_t batch = 16;
  TensorMap data = reference.random_inputs({{"batch", batch}}, seed + 1);
  data.merge(reference.random_targets({{"batch", batch}}, seed + 1));
  const TensorMap inputs{{"tokens", data.at("tokens")}};

  CHECK(max_relative_error(model.forward(inputs), reference.forward(inputs)) <= 1e-6);
  REQUIRE(gpu != nullptr);
  // the embedding's output, and the middle layer's coming back: each pass
  const size_t forward_crossings = (batch * 24 + batch * 40) * sizeof(float);
  CHECK(gpu->host_memory.handed_out == forward_crossings);

  // Two backward passes: the first also moves what a first training step moves once (the
  // parameters' gradients so far go up to cuda:0, Note [where a master lives]).
  for (int pass = 0; pass < 2; ++pass) {
    INFO("backward pass " << pass);
    gpu->host_memory.handed_out = 0;
    reference.zero_gradients();
    model.zero_gradients();
    const LossValue expected = reference.loss_and_backward(data, 3);
    const LossValue got = model.loss_and_backward(data, 3);
    CHECK(std::fabs(got.loss - expected.loss) <= 1e-6 * std::fabs(expected.loss));
    REQUIRE(any_nonzero(reference.gradients()));
    CHECK(max_relative_error(model.gradients(), reference.gradients()) <= 1e-6);
    // forward's two crossings, and backward's two: the gradient the head's backward writes
    // on the cpu for cuda:0, and the embedding's coming back from it
    const size_t step_crossings = forward_crossings + (batch * 40 + batch * 24) * sizeof(float);
    if (pass == 0) CHECK(gpu->host_memory.handed_out >= step_crossings);
    else CHECK(gpu->host_memory.handed_out == step_crossings);
  }
  std::filesystem::remove(yaml);
}

TEST_CASE("a model on GPUs has its batches gathered in their host memory, and trains as on the cpu", "[multidevice][copies]") {
  ScopedEnv no_sims("TANDEM_SIM_GPUS", nullptr);
  GpuWithHostMemory* gpu = nullptr;
  const std::string yaml = model_yaml("fit_");
  const uint32_t seed = fresh_seed();
  INFO("seed " << seed);
  TwoModels both = load_both(yaml, seed, gpu);
  Model &reference = both.reference, &model = both.placed;
  CHECK(&reference.batch_memory() == &cpu_allocator());
  REQUIRE(&model.batch_memory() != &cpu_allocator());

  const int64_t samples = 53;  // 4 batches of 16, the last short
  TensorMap data = reference.random_inputs({{"batch", samples}}, seed + 2);
  data.merge(reference.random_targets({{"batch", samples}}, seed + 2));
  const Dataset dataset(data);
  TrainingSpec spec = *reference.graph().training;
  spec.epochs = 1;
  spec.shuffle = true;
  std::vector<double> expected, got;
  Trainer(reference, spec).fit(dataset, nullptr, "", [&](const EpochReport& r) { expected = r.step_losses; });
  gpu->host_memory.handed_out = 0;
  Trainer(model, spec).fit(dataset, nullptr, "", [&](const EpochReport& r) { got = r.step_losses; });
  REQUIRE(got.size() == 4);
  REQUIRE(expected.size() == got.size());
  for (size_t i = 0; i < got.size(); ++i) CHECK(std::fabs(got[i] - expected[i]) <= 1e-5 * std::fabs(expected[i]));
  // every batch's tokens and labels (int64 each) were gathered there, beside the crossings
  CHECK(gpu->host_memory.handed_out >= static_cast<size_t>(samples) * 2 * sizeof(int64_t));
  std::filesystem::remove(yaml);
}
