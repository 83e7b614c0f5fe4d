// A model's gradient buffers are made when training first needs them, not with the model:
// inference holds its weights and activations only, as torch's parameters hold no .grad
// before a backward. Training that starts after placed inference (whose weight copies were
// made before any gradient existed) still reduces into the host's gradients.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>

#include "graph/load_graph.h"
#include "runtime/devices/device_registry.h"
#include "runtime/trainer.h"
#include "unit_test_support.h"

using namespace tandem;
using tandem::testing::seeded_rng;

namespace {

std::string mlp_yaml(const std::string& device) {
  return "name: lazy_grads\n"
         "inputs:\n"
         "  x: {shape: [batch, 256]}\n"
         "targets:\n"
         "  y: {shape: [batch, 8]}\n"
         "layers:\n"
         "  - {name: fc1, op: linear, in_features: 256, out_features: 512, device: " + device + "}\n"
         "  - {name: act, op: relu, device: " + device + "}\n"
         "  - {name: fc2, op: linear, in_features: 512, out_features: 8, device: " + device + "}\n"
         "loss: {op: mse_loss, input: fc2, target: y}\n";
}

TensorMap random_batch(Model& model, int64_t batch, std::mt19937_64& rng) {
  TensorMap b = model.random_inputs({{"batch", batch}}, rng() % 100000);
  b.merge(model.random_targets({{"batch", batch}}, rng() % 100000));
  return b;
}

size_t parameter_bytes(const Model& model) {
  size_t n = 0;
  for (const auto& [name, p] : model.parameters()) n += p.nbytes();
  return n;
}

}  // namespace

TEST_CASE("inference holds no gradient buffers: training makes them when it first needs them", "[train][memory]") {
  auto rng = seeded_rng("lazy gradients");
  Allocator& host = cpu_allocator();
  const size_t before = host.current_bytes();
  Model model(load_graph_from_string(mlp_yaml("cpu"), "lazy.yaml"));
  model.init_parameters(rng() % 1000);
  const size_t weights = parameter_bytes(model);
  REQUIRE(weights > (size_t{1} << 19));  // half a MiB: gradients would show
  CHECK(host.current_bytes() - before < weights + (size_t{64} << 10));
  host.reset_peak();
  TensorMap inputs = random_batch(model, 16, rng);
  inputs.erase("y");
  REQUIRE(model.forward(inputs).size() == 1);
  CHECK(host.peak_bytes() - before < weights + (size_t{256} << 10));  // weights and activations, no gradients

  // the first ask for them makes them, zero, for every trainable parameter
  const size_t at_ask = host.current_bytes();
  const TensorMap& grads = model.gradients();
  CHECK(grads.size() == 4);
  CHECK(host.current_bytes() - at_ask >= weights);
  for (const auto& [name, g] : grads) {
    INFO(name);
    CHECK(g.shape() == model.parameters().at(name).shape());
    for (float v : g.span<float>()) REQUIRE(v == 0.0f);
  }
}

TEST_CASE("training after placed inference reduces into gradients made after the weight copies",
          "[train][multidevice][memory]") {
  auto rng = seeded_rng("lazy gradients, placed");
  Model placed(load_graph_from_string(mlp_yaml("cuda:0"), "lazy.yaml"));
  Model reference(load_graph_from_string(mlp_yaml("cpu"), "lazy.yaml"));
  const uint64_t seed = rng() % 1000;
  placed.init_parameters(seed);
  reference.init_parameters(seed);
  PlacementPolicy policy;
  policy.name = "annotations";
  placed.use_devices(std::make_shared<DeviceRegistry>(DeviceOptions{.sim_gpus = 1, .sim_gpu_memory = size_t{64} << 20},
                                                      std::vector<CudaDeviceInfo>{}),
                     policy);
  TensorMap inputs = random_batch(reference, 8, rng);
  inputs.erase("y");
  const Tensor inferred = placed.forward(inputs).begin()->second.clone();  // makes the GPU's weight copies
  const Tensor expected = reference.forward(inputs).begin()->second;
  REQUIRE(std::memcmp(inferred.raw_data(), expected.raw_data(), expected.nbytes()) == 0);

  TrainingSpec spec;
  spec.optimizer.lr = 0.05;
  Trainer a(placed, spec), b(reference, spec);
  for (int step = 0; step < 3; ++step) {
    TensorMap batch = random_batch(reference, 8, rng);
    const double got = a.step(batch), want = b.step(batch);
    CHECK(std::fabs(got - want) <= 1e-5 * std::max(1.0, std::fabs(want)));
  }
  for (const auto& [name, g] : reference.gradients()) {
    INFO(name);
    const Tensor& h = placed.gradients().at(name);
    double worst = 0, scale = 1e-6;
    for (int64_t i = 0; i < g.numel(); ++i) scale = std::max(scale, double(std::fabs(g.data<float>()[i])));
    for (int64_t i = 0; i < g.numel(); ++i)
      worst = std::max(worst, double(std::fabs(h.data<float>()[i] - g.data<float>()[i])) / scale);
    CHECK(scale > 1e-6);  // the last step left real gradients
    CHECK(worst <= 1e-5);
  }
}
