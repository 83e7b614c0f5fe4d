// Parameters that GPUs hold (Note [where a master lives] in runtime/params/device_parameter_cache.h):
// the host sees them up to date whenever it reads them, checkpoints save and resume them
// with their optimizer state, the host's writes win, clipping sums them on the GPUs, and a
// model moved back to the cpu goes on training where it was. Each against the same run on
// the cpu, on simulated GPUs.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "multidevice_support.h"
#include "runtime/trainer.h"

using namespace tandem;
using namespace tandem::testing;

namespace {

std::string model_yaml(const std::string& optimizer, bool clip) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("tandem_held_" + optimizer + (clip ? "_clip_" : "_") + std::to_string(getpid()) + ".yaml"))
                               .string();
  std::ofstream(path) << R"(name: held
inputs:
  x: {shape: [batch, 12]}
targets:
  label: {shape: [batch], dtype: int64}
layers:
  - {name: stem, op: linear, in_features: 12, out_features: 24, device: cpu}
  - name: body
    data_parallel: {devices: [cuda:0, cuda:1], output_device: cuda:0, dim: 0}
    layers:
      - {name: fc, op: linear, in_features: 24, out_features: 24}
      - {name: act, op: relu}
      - {name: out, op: linear, in_features: 24, out_features: 6}
loss: {op: cross_entropy, input: body.out, target: label}
train:
  optimizer: {name: )" + optimizer + R"(, lr: 0.05)" + (optimizer == "sgd" ? ", momentum: 0.9" : "") + R"(}
)" + (clip ? "  clip_grad_norm: 0.05\n" : "");
  return path;
}

TensorMap batch_of(const Model& m, uint64_t seed) {
  Bindings b{{"batch", 10}};
  TensorMap d = m.random_inputs(b, seed);
  d.merge(m.random_targets(b, seed));
  return d;
}

struct Runs {
  std::string yaml;
  Model cpu, gpus;
  TrainingSpec spec;
  explicit Runs(const std::string& optimizer, bool clip = false)
      : yaml(model_yaml(optimizer, clip)), cpu(Model::load(yaml)), gpus(Model::load(yaml)), spec(*cpu.graph().training) {
    cpu.to(Device::cpu());
    cpu.init_parameters(21);
    gpus.init_parameters(21);
    gpus.use_devices(sim_gpus(2), policy());
  }
  ~Runs() { std::filesystem::remove(yaml); }
};

}  // namespace

TEST_CASE("held parameters train as on the cpu and the host reads them up to date", "[multidevice][held]") {
  const std::string optimizer = GENERATE(as<std::string>{}, "sgd", "adam");
  const bool clip = GENERATE(false, true);
  INFO(optimizer << (clip ? ", clipped" : ""));
  Runs r(optimizer, clip);
  Trainer on_cpu(r.cpu, r.spec), on_gpus(r.gpus, r.spec);
  for (uint64_t step = 0; step < 6; ++step) {
    const TensorMap d = batch_of(r.cpu, 100 + step);
    const double want = on_cpu.step(d);
    CHECK(on_gpus.step(d) == Approx(want).epsilon(1e-5));
    // the host's tensors, read between steps: up to date
    CHECK(max_relative_error(r.gpus.parameters(), r.cpu.parameters()) <= 1e-5);
  }
  CHECK(max_relative_error(r.gpus.gradients(), r.cpu.gradients()) <= 1e-5);
  // the GPUs hold body's parameters: they did the arithmetic, nothing crossed to the host
  for (const DeviceReport& d : r.gpus.device_report())
    if (d.device == Device::cpu()) CHECK(d.bytes_in == 10 * 24 * 4);  // body's input gradient only
}

TEST_CASE("a checkpoint of held parameters resumes as one continuous run, on GPUs or the cpu", "[multidevice][held]") {
  Runs whole("adam"), first("adam");
  const std::string path =
      (std::filesystem::temp_directory_path() / ("tandem_held_ckpt_" + std::to_string(getpid()) + ".safetensors")).string();
  Trainer continuous(whole.gpus, whole.spec), before(first.gpus, first.spec);
  continuous.set_total_steps(6);
  before.set_total_steps(6);
  for (uint64_t step = 0; step < 6; ++step) continuous.step(batch_of(whole.gpus, 200 + step));
  for (uint64_t step = 0; step < 3; ++step) before.step(batch_of(first.gpus, 200 + step));
  before.save_checkpoint(path);

  // on simulated GPUs again: the same bits as the run that never stopped
  Model resumed = Model::load(first.yaml);
  resumed.init_parameters(99);  // the checkpoint replaces these
  resumed.use_devices(sim_gpus(2), policy());
  Trainer after(resumed, first.spec);
  after.load_checkpoint(path);
  for (uint64_t step = 3; step < 6; ++step) after.step(batch_of(resumed, 200 + step));
  CHECK(max_relative_error(resumed.parameters(), whole.gpus.parameters()) == 0);

  // on the cpu: the same run, to float rounding
  Model on_cpu = Model::load(first.yaml);
  on_cpu.to(Device::cpu());
  Trainer cpu_after(on_cpu, first.spec);
  cpu_after.load_checkpoint(path);
  for (uint64_t step = 3; step < 6; ++step) cpu_after.step(batch_of(on_cpu, 200 + step));
  CHECK(max_relative_error(on_cpu.parameters(), whole.gpus.parameters()) <= 1e-5);
  std::filesystem::remove(path);
}

TEST_CASE("writing the host's weights wins over the GPUs' copies, and a model moved to the cpu trains on",
          "[multidevice][held]") {
  Runs r("sgd");
  Trainer on_cpu(r.cpu, r.spec), on_gpus(r.gpus, r.spec);
  for (uint64_t step = 0; step < 2; ++step) {
    const TensorMap d = batch_of(r.cpu, 300 + step);
    on_cpu.step(d);
    on_gpus.step(d);
  }
  // new weights on the host: the GPUs take them before the next step
  Model fresh = Model::load(r.yaml);
  fresh.init_parameters(7);
  r.cpu.set_weights(fresh.parameters());
  r.gpus.set_weights(fresh.parameters());
  for (uint64_t step = 2; step < 4; ++step) {
    const TensorMap d = batch_of(r.cpu, 300 + step);
    CHECK(on_gpus.step(d) == Approx(on_cpu.step(d)).epsilon(1e-5));
  }
  CHECK(max_relative_error(r.gpus.parameters(), r.cpu.parameters()) <= 1e-5);
  // back to the cpu: the weights, the gradients and the momentum come home
  r.gpus.to(Device::cpu());
  for (uint64_t step = 4; step < 6; ++step) {
    const TensorMap d = batch_of(r.cpu, 300 + step);
    CHECK(on_gpus.step(d) == Approx(on_cpu.step(d)).epsilon(1e-5));
  }
  CHECK(max_relative_error(r.gpus.parameters(), r.cpu.parameters()) <= 1e-5);
}
