// Data-parallel blocks on simulated GPUs against the same model unwrapped on the cpu:
// outputs, losses step by step and weights after 20 optimizer steps, over 1 to 4 devices,
// even and uneven batches (and batches smaller than the device count), dim 0 and dim 1
// (sequence-first), nested between layers on other devices.
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

std::string device_list(int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s += (i ? ", cuda:" : "cuda:") + std::to_string(i);
  return s;
}

std::string write_yaml(const std::string& tag, const std::string& text) {  // one file per process and case
  std::string path = (std::filesystem::temp_directory_path() /
                      ("tandem_dp_" + tag + "_" + std::to_string(getpid()) + ".yaml")).string();
  std::ofstream(path) << text;
  return path;
}

// block1 on the cpu -> data_parallel(linear, tanh, linear) -> block3 on cuda:0, the seeds'
// nested model with a loss.
std::string nested_yaml(int devices, const std::string& optimizer) {
  return write_yaml("nested_" + std::to_string(devices) + optimizer, R"(name: dp_nested
inputs:
  x: {shape: [batch, 10]}
targets:
  label: {shape: [batch], dtype: int64}
layers:
  - {name: block1, op: linear, in_features: 10, out_features: 20, device: cpu}
  - name: block2
    data_parallel: {devices: [)" + device_list(devices) + R"(], output_device: cuda:0, dim: 0}
    layers:
      - {name: fc, op: linear, in_features: 20, out_features: 20}
      - {name: act, op: tanh}
      - {name: fc2, op: linear, in_features: 20, out_features: 5}
  - {name: block3, op: linear, in_features: 5, out_features: 5, device: cuda:0}
outputs: [block3]
loss: {op: cross_entropy, input: block3, target: label}
train:
  optimizer: {name: )" + optimizer + R"(, lr: 0.05}
)");
}

// Sequence-first [seq, batch, features], scattered along dim 1, output on the cpu.
std::string sequence_first_yaml(int devices, const std::string& optimizer) {
  return write_yaml("seq_" + std::to_string(devices) + optimizer, R"(name: dp_sequence_first
inputs:
  x: {shape: [seq, batch, 6]}
targets:
  y: {shape: [seq, batch, 4]}
layers:
  - name: body
    data_parallel: {devices: [)" + device_list(devices) + R"(], output_device: cpu, dim: 1}
    layers:
      - {name: fc, op: linear, in_features: 6, out_features: 8}
      - {name: act, op: relu}
      - {name: out, op: linear, in_features: 8, out_features: 4}
  - {name: head, op: linear, in_features: 4, out_features: 4}
outputs: [head]
loss: {op: mse_loss, input: head, target: y}
train:
  optimizer: {name: )" + optimizer + R"(, lr: 0.01}
)");
}

}  // namespace

TEST_CASE("a data-parallel block computes and trains what the unwrapped model does on the cpu",
          "[multidevice][data_parallel]") {
  const int devices = GENERATE(1, 2, 3, 4);
  const int64_t batch = GENERATE(8, 7, 3);
  const std::string optimizer = GENERATE(as<std::string>{}, "sgd", "adam");
  const int dim = GENERATE(0, 1);
  INFO(devices << " devices, batch " << batch << ", " << optimizer << ", dim " << dim);
  const std::string yaml = dim == 0 ? nested_yaml(devices, optimizer) : sequence_first_yaml(devices, optimizer);
  Model reference = Model::load(yaml);
  Model model = Model::load(yaml);
  reference.init_parameters(11);
  model.init_parameters(11);
  model.use_devices(sim_gpus(devices), policy());
  Bindings b{{"batch", batch}};
  if (dim == 1) b["seq"] = 3;

  // forward, inference
  TensorMap inputs = reference.random_inputs(b, 1);
  CHECK(max_relative_error(model.forward(inputs), reference.forward(inputs)) <= 1e-5);
  // torch.chunk's replicas: ceil(batch / devices) per chunk, fewer chunks for a small batch
  int64_t chunk = (batch + devices - 1) / devices;
  int replicas = static_cast<int>((batch + chunk - 1) / chunk);
  int replica_steps = 0;
  const Graph& executed = executed_graph(model.last_plan(), model.graph());
  for (const OpStep& s : model.last_plan().steps) {
    const Node& n = executed.nodes[s.node];
    if (n.replica && n.replica->kind == ReplicaRole::Kind::replica && n.op == "linear" &&
        n.path.rfind(dim == 0 ? "block2.fc@" : "body.fc@", 0) == 0) {
      ++replica_steps;
      CHECK(s.device == Device::cuda(n.replica->replica));
    }
  }
  CHECK(replica_steps == replicas);

  // one step's gradients, then 20 optimizer steps on fresh batches
  TensorMap data = reference.random_inputs(b, 2);
  data.merge(reference.random_targets(b, 2));
  reference.zero_gradients();
  model.zero_gradients();
  LossValue expected = reference.loss_and_backward(data, 0);
  LossValue got = model.loss_and_backward(data, 0);
  CHECK(std::fabs(got.loss - expected.loss) <= 1e-5 * std::max(1.0, std::fabs(expected.loss)));
  REQUIRE(any_nonzero(reference.gradients()));
  CHECK(max_relative_error(model.gradients(), reference.gradients()) <= 1e-5);

  const TrainingSpec spec = *reference.graph().training;
  Trainer expected_trainer(reference, spec);
  Trainer got_trainer(model, spec);
  for (int step = 0; step < 20; ++step) {
    TensorMap d = reference.random_inputs(b, 100 + step);
    d.merge(reference.random_targets(b, 100 + step));
    double e = expected_trainer.step(d);
    double g = got_trainer.step(d);
    CHECK(std::fabs(g - e) <= 1e-5 * std::max(1.0, std::fabs(e)));
  }
  CHECK(max_relative_error(model.parameters(), reference.parameters()) <= 1e-5);
  // and the replicas' device copies followed the optimizer
  TensorMap after = reference.random_inputs(b, 3);
  CHECK(max_relative_error(model.forward(after), reference.forward(after)) <= 1e-5);
}

namespace {

// A wide classifier: the logits are the largest tensor, the pile-up the parallel loss avoids.
std::string classifier_yaml(int devices, bool parallel, const std::string& reduction) {
  return write_yaml(std::string("classifier_") + std::to_string(devices) + (parallel ? "p" : "g") + reduction,
                    R"(name: dp_classifier
inputs:
  x: {shape: [batch, 16]}
targets:
  label: {shape: [batch], dtype: int64}
layers:
  - name: net
    data_parallel: {devices: [)" + device_list(devices) + R"(], output_device: cuda:0}
    layers:
      - {name: hidden, op: linear, in_features: 16, out_features: 32}
      - {name: act, op: relu}
      - {name: logits, op: linear, in_features: 32, out_features: 3000}
outputs: [net.logits]
loss: {op: cross_entropy, input: net.logits, target: label, reduction: )" + reduction +
                        R"(, ignore_index: 0, parallel: )" + (parallel ? "true" : "false") + R"(}
train:
  optimizer: {name: adam, lr: 0.001}
)");
}

}  // namespace

TEST_CASE("a parallel loss trains as the gathered loss does and leaves the output device no heavier",
          "[multidevice][data_parallel]") {
  const int devices = GENERATE(2, 4);
  const std::string reduction = GENERATE(as<std::string>{}, "mean", "sum");
  const int64_t batch = GENERATE(64, 61);
  INFO(devices << " devices, " << reduction << ", batch " << batch);
  Model reference = Model::load(classifier_yaml(devices, true, reduction));
  Model parallel = Model::load(classifier_yaml(devices, true, reduction));
  Model gathered = Model::load(classifier_yaml(devices, false, reduction));
  for (Model* m : {&reference, &parallel, &gathered}) m->init_parameters(5);
  parallel.use_devices(sim_gpus(devices), policy());
  gathered.use_devices(sim_gpus(devices), policy());
  Bindings b{{"batch", batch}};
  const TrainingSpec spec = *reference.graph().training;
  Trainer t_ref(reference, spec), t_par(parallel, spec), t_gat(gathered, spec);
  for (int step = 0; step < 10; ++step) {
    TensorMap d = reference.random_inputs(b, 40 + step);
    d.merge(reference.random_targets(b, 40 + step));  // class 0 is ignored: chunks count differently
    double e = t_ref.step(d);
    CHECK(std::fabs(t_par.step(d) - e) <= 1e-5 * std::max(1.0, std::fabs(e)));
    CHECK(std::fabs(t_gat.step(d) - e) <= 1e-5 * std::max(1.0, std::fabs(e)));
  }
  CHECK(max_relative_error(parallel.parameters(), reference.parameters()) <= 1e-5);
  CHECK(max_relative_error(gathered.parameters(), reference.parameters()) <= 1e-5);

  // Peak memory per GPU over the run: with the gather, the output device holds the whole
  // batch's logits and their gradient; with the parallel loss, no more than any other.
  auto peaks = [](const Model& m) {
    std::vector<double> out;
    for (const DeviceReport& r : m.device_totals())
      if (r.device.kind == DeviceKind::cuda) out.push_back(static_cast<double>(r.peak_bytes));
    return out;
  };
  std::vector<double> p = peaks(parallel), g = peaks(gathered);
  REQUIRE(p.size() == static_cast<size_t>(devices));
  const double p_max = *std::max_element(p.begin(), p.end()), p_min = *std::min_element(p.begin(), p.end());
  CHECK(p[0] <= p_max);
  CHECK(p_max / p_min <= (batch % devices == 0 ? 1.1 : 1.5));  // an uneven last chunk is lighter
  CHECK(g[0] > 1.5 * g[1]);  // the pile-up, measured
  CHECK(p[0] < g[0]);
}
