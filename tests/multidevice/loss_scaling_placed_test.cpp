// fp16 loss scaling in placed training: the loss's gradient is scaled on the device that
// computes the loss, and the gradients a GPU holds (a parameter only it runs keeps its
// master there) are checked and unscaled there. A model with a layer on a simulated GPU
// skips the same steps with the same scales as on the cpu, and trains to its weights.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <random>

#include "graph/load_graph.h"
#include "multidevice_support.h"
#include "runtime/trainer.h"

using namespace tandem;
using namespace tandem::testing;

TEST_CASE("placed fp16 training skips the steps the cpu skips, with the same scales and weights",
          "[multidevice][precision][loss_scaling]") {
  const std::string yaml = R"(name: scaled_placed
precision: fp16
inputs:
  x: {shape: [batch, 6]}
targets:
  y: {shape: [batch, 3]}
layers:
  - {name: fc1, op: linear, in_features: 6, out_features: 16}
  - {name: act, op: tanh, device: cuda:0}
  - {name: fc2, op: linear, in_features: 16, out_features: 3, device: cuda:0}
loss: {op: mse_loss, input: fc2, target: y}
train:
  batch: 8
  optimizer: {name: adam, lr: 0.01}
  loss_scaling: {init_scale: 6.64613997892457936e+35, growth_interval: 2}
)";
  // init_scale 2^119: with targets ~N(0, 1000) the scaled gradients overflow near 2^120
  Model cpu(load_graph_from_string(yaml, "scaled_placed.yaml")), placed(load_graph_from_string(yaml, "scaled_placed.yaml"));
  cpu.to(Device::cpu());
  cpu.init_parameters(4);
  placed.init_parameters(4);
  placed.use_devices(sim_gpus(1), policy());
  Trainer t_cpu(cpu, *cpu.graph().training), t_placed(placed, *placed.graph().training);
  const uint64_t seed = std::random_device{}();
  std::printf("placed loss scaling: seed %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  int skipped = 0;
  for (int step = 0; step < 16; ++step) {
    INFO("step " << step + 1);
    Tensor x = Tensor::empty({8, 6}, DType::float32), y = Tensor::empty({8, 3}, DType::float32);
    for (float& v : x.span<float>()) v = normal(rng);
    for (float& v : y.span<float>()) v = 1000 * normal(rng);
    const TensorMap batch{{"x", x}, {"y", y}};
    REQUIRE(t_placed.loss_scale() == t_cpu.loss_scale());
    const double loss = t_cpu.step(batch);
    CHECK(std::fabs(t_placed.step(batch) - loss) <= 1e-5 * std::fabs(loss));
    CHECK(t_placed.last_step_skipped() == t_cpu.last_step_skipped());
    skipped += t_cpu.last_step_skipped();
  }
  CHECK(skipped > 0);
  CHECK(t_placed.skipped_steps() == t_cpu.skipped_steps());
  CHECK(t_placed.loss_scale() == t_cpu.loss_scale());
  CHECK(max_relative_error(placed.parameters(), cpu.parameters()) <= 1e-5);
}
