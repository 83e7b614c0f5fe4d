// Out of memory mid-step: on simulated GPUs too small for a batch, a training step fails
// with an OutOfMemory naming the step, the layer, the device and its bytes; every buffer
// of the step goes back to its pool; the weights and the optimizer's state are those
// before the step, bit for bit; and the same Trainer goes on with smaller batches to the
// very weights of a trainer that only ever ran those.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "multidevice_support.h"
#include "runtime/devices/device_registry.h"
#include "runtime/model.h"
#include "runtime/trainer.h"
#include "../unit/unit_test_support.h"

using namespace tandem;
using namespace tandem::testing;

namespace {

std::string temp_path(const std::string& name) {  // one file per process: ctest runs cases in parallel
  return (std::filesystem::temp_directory_path() / ("tandem_oom_" + name + "_" + std::to_string(getpid()))).string();
}

// A cpu table feeding a GPU layer: per sample, the GPU holds the 64-float activation copied
// up, kept for the weight's gradient, and in backward as much again for its gradient.
std::string placed_yaml() {
  std::string path = temp_path("placed") + ".yaml";
  std::ofstream(path) << R"(name: oom_placed
inputs:
  tokens: {shape: [batch], dtype: int64}
targets:
  label: {shape: [batch], dtype: int64}
layers:
  - {name: embedding, op: embedding, num_embeddings: 50, embedding_dim: 64, device: cpu}
  - {name: fc, op: linear, in_features: 64, out_features: 4, device: cuda:0}
loss: {op: cross_entropy, input: fc, target: label}
train:
  batch: 256
  optimizer: {name: adam, lr: 0.01}
)";
  return path;
}

// A data_parallel block over two GPUs behind a cpu layer; the loss on cuda:0.
std::string data_parallel_yaml() {
  std::string path = temp_path("dp") + ".yaml";
  std::ofstream(path) << R"(name: oom_data_parallel
inputs:
  x: {shape: [batch, 16]}
targets:
  label: {shape: [batch], dtype: int64}
layers:
  - {name: first, op: linear, in_features: 16, out_features: 48, device: cpu}
  - name: block
    data_parallel: {devices: [cuda:0, cuda:1], output_device: cuda:0, dim: 0}
    layers:
      - {name: fc, op: linear, in_features: 48, out_features: 48}
      - {name: act, op: tanh}
      - {name: out, op: linear, in_features: 48, out_features: 3}
loss: {op: cross_entropy, input: block.out, target: label}
train:
  batch: 256
  optimizer: {name: sgd, lr: 0.1, momentum: 0.9}
)";
  return path;
}

TensorMap batch_of(const Model& model, int64_t batch, uint64_t seed) {
  TensorMap data = model.random_inputs({{"batch", batch}}, seed);
  data.merge(model.random_targets({{"batch", batch}}, seed));
  return data;
}

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

/// The weights, the optimizer's state and the step count, as a checkpoint's bytes.
std::string checkpoint_bytes(const Trainer& trainer, const std::string& name) {
  const std::string path = temp_path(name) + ".safetensors";
  trainer.save_checkpoint(path);
  std::string bytes = file_bytes(path);
  std::filesystem::remove(path);
  REQUIRE(!bytes.empty());
  return bytes;
}

std::vector<size_t> bytes_in_use(DeviceRegistry& registry, int gpus) {
  std::vector<size_t> out;
  for (int d = 0; d < gpus; ++d) out.push_back(registry.allocator(Device::cuda(d)).current_bytes());
  return out;
}

/// What the model takes of GPUs too big to run out, to size the small ones: its bytes in
/// use between steps, and the most any GPU had in use during a small and a big step.
struct Probe {
  std::vector<size_t> settled;  // per GPU, after a first small step: weights, gradients, state
  size_t small_peak = 0, big_peak = 0;  // over the GPUs
};

Probe probe(const std::string& yaml, int gpus, int64_t small, int64_t big) {
  Model model = Model::load(yaml);
  model.init_parameters(7);
  auto registry = sim_gpus(gpus);
  model.use_devices(registry, policy());
  Trainer trainer(model, *model.graph().training);
  trainer.step(batch_of(model, small, 1));
  Probe p;
  p.settled = bytes_in_use(*registry, gpus);
  auto peak_of = [&](int64_t batch, uint64_t seed) {
    for (int d = 0; d < gpus; ++d) registry->allocator(Device::cuda(d)).reset_peak();
    trainer.step(batch_of(model, batch, seed));
    size_t peak = 0;
    for (int d = 0; d < gpus; ++d) peak = std::max(peak, registry->allocator(Device::cuda(d)).peak_bytes());
    return peak;
  };
  p.small_peak = peak_of(small, 2);
  p.big_peak = peak_of(big, 3);
  return p;
}

/// Steps small batch 1, the big batch (which must fail), then small batches 2 and 3 on GPUs
/// of `capacity` bytes; checks the failure left nothing behind and the end matches a
/// trainer that ran small batches 1, 2 and 3 only. Returns the error's message.
std::string fail_then_continue(const std::string& yaml, int gpus, size_t capacity, int64_t small, int64_t big) {
  std::mt19937_64 rng = seeded_rng("fail_then_continue");  // fresh weights and batches each run
  const uint64_t init = rng(), seed = rng();
  Model model = Model::load(yaml);
  model.init_parameters(init);
  auto registry = sim_gpus(gpus, capacity);
  model.use_devices(registry, policy());
  Trainer trainer(model, *model.graph().training);
  const double first_loss = trainer.step(batch_of(model, small, seed + 1));
  REQUIRE(std::isfinite(first_loss));

  const std::vector<size_t> before = bytes_in_use(*registry, gpus);
  const size_t host_before = cpu_allocator().current_bytes();
  const std::string state_before = checkpoint_bytes(trainer, "before");
  std::string message;
  try {
    trainer.step(batch_of(model, big, seed + 9));
    FAIL("a batch of " << big << " fitted in " << capacity << " bytes per GPU");
  } catch (const OutOfMemory& e) {
    message = e.what();
    CHECK(e.device.kind == DeviceKind::cuda);
    CHECK(e.capacity == capacity);
    CHECK(e.requested > e.capacity - e.in_use);  // it did not fit in what was free
    CHECK_THAT(message, Catch::StartsWith("training step 2 (a batch of " + std::to_string(big) + "): layer '"));
    CHECK_THAT(message, Catch::Contains("out of memory on " + e.device.str()) && Catch::Contains(" free)"));
  }
  // every buffer of the step is back in its pool; nothing of it was applied
  CHECK(bytes_in_use(*registry, gpus) == before);
  CHECK(cpu_allocator().current_bytes() == host_before);
  CHECK(trainer.steps_done() == 1);
  CHECK(checkpoint_bytes(trainer, "after") == state_before);  // weights, optimizer state, step
  CHECK_FALSE(any_nonzero(model.gradients()));

  const double second = trainer.step(batch_of(model, small, seed + 2));
  const double third = trainer.step(batch_of(model, small, seed + 3));

  Model fresh_model = Model::load(yaml);
  fresh_model.init_parameters(init);
  fresh_model.use_devices(sim_gpus(gpus), policy());  // big GPUs: this one never fails
  Trainer fresh(fresh_model, *fresh_model.graph().training);
  CHECK(fresh.step(batch_of(fresh_model, small, seed + 1)) == first_loss);
  CHECK(fresh.step(batch_of(fresh_model, small, seed + 2)) == second);
  CHECK(fresh.step(batch_of(fresh_model, small, seed + 3)) == third);
  CHECK(trainer.steps_done() == 3);
  CHECK(checkpoint_bytes(trainer, "continued") == checkpoint_bytes(fresh, "fresh"));
  // and the weights moved: the steps after the failure trained
  CHECK(checkpoint_bytes(trainer, "continued") != state_before);
  return message;
}

}  // namespace

TEST_CASE("a step out of GPU memory in forward fails named, returns its buffers, and a smaller batch goes on",
          "[multidevice][train][oom]") {
  const std::string yaml = placed_yaml();
  const int64_t big = 256, small = 64;
  const Probe p = probe(yaml, 1, small, big);
  INFO("settled " << p.settled[0] << " bytes, peaks " << p.small_peak << " and " << p.big_peak);
  REQUIRE(p.small_peak < p.big_peak);
  // Forward copies 256 bytes a sample of the table's rows up to cuda:0: 200 a sample of the
  // big batch do not hold them, and fit the small batch's whole step (about 4 x 64 x 138).
  const size_t capacity = p.settled[0] + static_cast<size_t>(big) * 200;
  REQUIRE(p.small_peak < capacity);
  const std::string message = fail_then_continue(yaml, 1, capacity, small, big);
  CHECK_THAT(message, Catch::Contains("layer 'fc' (linear): out of memory on cuda:0: asked for 64.0 KiB"));
  CHECK_THAT(message, !Catch::Contains("backward"));
  std::filesystem::remove(yaml);
}

TEST_CASE("a step out of GPU memory in backward fails named, returns its buffers, and a smaller batch goes on",
          "[multidevice][train][oom]") {
  const std::string yaml = placed_yaml();
  const int64_t big = 256, small = 64;
  const Probe p = probe(yaml, 1, small, big);
  INFO("settled " << p.settled[0] << " bytes, peaks " << p.small_peak << " and " << p.big_peak);
  // Forward and the loss hold about 296 bytes a sample; backward adds 256 for the gradient
  // of the rows: 400 a sample get the big batch through forward, not through backward.
  const size_t capacity = p.settled[0] + static_cast<size_t>(big) * 400;
  REQUIRE(p.small_peak < capacity);
  REQUIRE(capacity < p.big_peak);
  const std::string message = fail_then_continue(yaml, 1, capacity, small, big);
  CHECK_THAT(message, Catch::Contains("layer 'fc' (linear) backward: out of memory on cuda:0: asked for 64.0 KiB"));
  std::filesystem::remove(yaml);
}

TEST_CASE("a data_parallel block out of GPU memory fails named, returns its buffers, and a smaller batch goes on",
          "[multidevice][train][oom][data_parallel]") {
  const std::string yaml = data_parallel_yaml();
  const int64_t big = 256, small = 64;
  const Probe p = probe(yaml, 2, small, big);
  INFO("peaks " << p.small_peak << " and " << p.big_peak);
  REQUIRE(p.small_peak < p.big_peak);
  // between what the small batch needs at most on any GPU and what the big one does
  const size_t capacity = (p.small_peak + p.big_peak) / 2;
  const std::string message = fail_then_continue(yaml, 2, capacity, small, big);
  CHECK_THAT(message, Catch::Contains("layer 'block."));
  std::filesystem::remove(yaml);
}

TEST_CASE("set_batch lets fit() go on with a smaller batch after running out of GPU memory",
          "[multidevice][train][oom]") {
  const std::string yaml = placed_yaml();
  Model model = Model::load(yaml);
  std::mt19937_64 rng = seeded_rng("set_batch after running out");
  model.init_parameters(rng());
  model.use_devices(sim_gpus(1, 48 * 1024), policy());
  Trainer trainer(model, *model.graph().training);
  // 512 samples of a fresh random set: the batch of 256 needs more than 48 KiB on cuda:0
  TensorMap samples = batch_of(model, 512, rng());
  Dataset data(samples);
  CHECK_THROWS_AS(trainer.fit(data, nullptr, "", {}), OutOfMemory);
  CHECK(trainer.steps_done() == 0);
  CHECK_THROWS_AS(trainer.set_batch(0), UserError);
  trainer.set_batch(32);
  std::vector<double> losses;
  trainer.fit(data, nullptr, "", [&](const EpochReport& r) { losses = r.step_losses; });
  CHECK(losses.size() == 16);
  CHECK(trainer.steps_done() == 16);
  CHECK(trainer.epochs_done() == 1);
  std::filesystem::remove(yaml);
}

TEST_CASE("tandem train out of GPU memory exits 2 naming the step, layer and device, and a smaller --batch trains",
          "[multidevice][cli][train][oom]") {
  // digits_mlp's linear layers on a 1 MiB GPU: their weights, gradients and Adam's moments
  // fit (about 400 KiB), a batch of 1024's activations (512 KiB a layer) do not
  const std::string args = "train " + std::string(TANDEM_SOURCE_DIR) + "/configs/digits_mlp.yaml --epochs 1 " +
                           "--sim-gpus 1 --sim-gpu-memory 1MiB --place 'fc*=cuda:0'";
  int code = 0;
  const std::string out = run_cli(args + " --batch 1024", &code, "env -u TANDEM_SIM_GPUS -u TANDEM_SIM_GPU_MEMORY ");
  CHECK(code == 2);
  CHECK_THAT(out, Catch::Contains("\nerror: training step 1 (a batch of 1024): layer 'fc"));
  CHECK_THAT(out, Catch::Contains("out of memory on cuda:0: asked for ") && Catch::Contains("of 1.0 MiB in use (") &&
                      Catch::Contains(" free); try a smaller batch (--batch)"));
  const std::string fits = run_cli(args + " --batch 32", &code, "env -u TANDEM_SIM_GPUS -u TANDEM_SIM_GPU_MEMORY ");
  CHECK(code == 0);
  CHECK_THAT(fits, !Catch::Contains("error"));
}
