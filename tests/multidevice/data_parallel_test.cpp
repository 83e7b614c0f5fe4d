// Data-parallel blocks on simulated GPUs against the same model unwrapped on the cpu:
// outputs, losses step by step and weights after 20 optimizer steps, over 1 to 4 devices,
// even and uneven batches (and batches smaller than the device count), dim 0 and dim 1
// (sequence-first), nested between layers on other devices.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>

#include <filesystem>
#include <fstream>
#include <map>
#include <span>
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
  reference.to(Device::cpu());  // the single-device reference
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
  reference.to(Device::cpu());  // the single-device reference
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

TEST_CASE("data-parallel training keeps the replicas' gradients and optimizer state on the GPUs",
          "[multidevice][data_parallel]") {
  // Each replica holds the block's parameters, their gradients and Adam's moments (Note
  // [where a master lives]): the gradients are all-reduced among the GPUs, and nothing
  // of them, nor of the weights, crosses to the host in a step. (Before, every replica's
  // gradients came to the host to be added to the master, and all 4 copies once waited
  // there at once: 8 x the parameters.)
  Model model = Model::load(classifier_yaml(4, true, "mean"));
  model.init_parameters(9);
  model.use_devices(sim_gpus(4), policy());
  Trainer trainer(model, *model.graph().training);
  Bindings b{{"batch", 256}};
  for (int step = 0; step < 3; ++step) {
    TensorMap d = model.random_inputs(b, 70 + step);
    d.merge(model.random_targets(b, 70 + step));
    trainer.step(d);
  }
  double params = 0;
  for (const auto& [name, t] : model.parameters()) params += static_cast<double>(t.nbytes());
  double cpu_peak = 0, cpu_in = 0;
  std::vector<double> gpu_peaks;
  for (const DeviceReport& r : model.device_totals()) {
    if (r.device == Device::cpu()) cpu_peak = static_cast<double>(r.peak_bytes), cpu_in = static_cast<double>(r.bytes_in);
    else gpu_peaks.push_back(static_cast<double>(r.peak_bytes));
  }
  INFO("cpu peak " << cpu_peak << " bytes, parameters " << params << " bytes");
  // the host's copies of the weights, their gradient buffers and Adam's moments (read only
  // for checkpoints), and the batch: no gradients in flight
  CHECK(cpu_peak <= 5.5 * params);
  CHECK(cpu_in < params);  // no gradient came down (the losses' values are scalars)
  // each GPU: the weights, their gradients, Adam's two moments, and its chunk's activations
  REQUIRE(gpu_peaks.size() == 4);
  for (double p : gpu_peaks) CHECK(p >= 4 * params);
  CHECK(*std::max_element(gpu_peaks.begin(), gpu_peaks.end()) <= 1.1 * *std::min_element(gpu_peaks.begin(), gpu_peaks.end()));
}

TEST_CASE("the seeds' tutorial prints each replica's sizes and the gathered sizes", "[multidevice][data_parallel]") {
  int code = 0;
  std::string out = run_program(std::string(TANDEM_DP_TUTORIAL) + " " + TANDEM_SOURCE_DIR +
                                    "/configs/dp_tutorial.yaml --sim-gpus 2", &code);
  REQUIRE(code == 0);
  std::string replica15 = "\tIn Model: input size [15, 5] output size [15, 2]\n";
  std::string replica5 = "\tIn Model: input size [5, 5] output size [5, 2]\n";
  std::string expected = "Let's use 2 GPUs! (simulated)\n";
  for (int i = 0; i < 3; ++i) expected += replica15 + replica15 + "Outside: input size [30, 5] output size [30, 2]\n";
  expected += replica5 + replica5 + "Outside: input size [10, 5] output size [10, 2]\n";
  CHECK(out == expected);

  // devices [1, 2] of four; and a device that is not there
  out = run_program(std::string(TANDEM_DP_TUTORIAL) + " " + TANDEM_SOURCE_DIR + "/configs/dp_choose_devices.yaml --sim-gpus 4",
                    &code);
  CHECK(code == 0);
  CHECK(out.find("Outside: input size [10, 5] output size [10, 2]") != std::string::npos);
  out = run_program(std::string(TANDEM_DP_TUTORIAL) + " " + TANDEM_SOURCE_DIR + "/configs/dp_choose_devices.yaml --sim-gpus 2",
                    &code);
  CHECK(code == 2);
  CHECK(out.find("data_parallel block 'model' lists cuda:2 in its devices, but this machine has cpu, cuda:0, cuda:1") !=
        std::string::npos);
}

TEST_CASE("forward hooks see every layer on one device and each replica's chunk", "[multidevice][data_parallel]") {
  Model model = Model::load(std::string(TANDEM_SOURCE_DIR) + "/configs/seed_nested_dp.yaml");
  model.to(Device::cpu());
  model.init_parameters(1);
  std::vector<std::string> seen;
  model.set_forward_hook([&](const LayerCall& call) {
    seen.push_back(call.node->path + " " + shape_str(call.input_shapes.at(0)) + " -> " + shape_str(call.output_shape) +
                   " on " + call.device.str());
  });
  Bindings b{{"batch", 7}};
  model.forward(model.random_inputs(b, 1));
  CHECK(seen == std::vector<std::string>{"block1 [7, 10] -> [7, 20] on cpu", "block2.fc [7, 20] -> [7, 20] on cpu",
                                         "block3 [7, 20] -> [7, 20] on cpu"});
  seen.clear();
  model.use_devices(sim_gpus(2), policy());
  model.forward(model.random_inputs(b, 1));
  std::sort(seen.begin(), seen.end());  // the two replicas run on their own queues
  CHECK(std::find(seen.begin(), seen.end(), "block2.fc@0 [4, 20] -> [4, 20] on cuda:0") != seen.end());
  CHECK(std::find(seen.begin(), seen.end(), "block2.fc@1 [3, 20] -> [3, 20] on cuda:1") != seen.end());
  CHECK(std::find(seen.begin(), seen.end(), "block2@gather(block2.fc) [4, 20] -> [7, 20] on cuda:0") != seen.end());
  model.set_forward_hook({});
  seen.clear();
  model.forward(model.random_inputs(b, 2));
  CHECK(seen.empty());
}

TEST_CASE("chunk_sizes sizes the replicas and a parallel loss needs a data_parallel block", "[multidevice][data_parallel]") {
  const std::string yaml = write_yaml("chunks", R"(name: chunks
inputs:
  x: {shape: [batch, 4]}
layers:
  - name: body
    data_parallel: {devices: [cuda:0, cuda:1], output_device: cpu, chunk_sizes: [7, 3]}
    layers:
      - {name: fc, op: linear, in_features: 4, out_features: 2}
outputs: [body.fc]
)");
  Model model = Model::load(yaml);
  Model reference = Model::load(yaml);
  reference.to(Device::cpu());  // the single-device reference
  model.init_parameters(3);
  reference.init_parameters(3);
  model.use_devices(sim_gpus(2), policy());
  std::vector<std::string> replicas;
  std::map<int, std::pair<Tensor, Tensor>> replica_tensors;  // replica -> its input and output, on the host
  model.set_forward_hook([&](const LayerCall& call) {
    if (call.node->replica && call.node->replica->kind == ReplicaRole::Kind::replica) {
      replicas.push_back(call.device.str() + " " + shape_str(call.output_shape));
      replica_tensors[call.node->replica->replica] = {call.inputs.at(0), call.output};
    }
  });
  TensorMap in = reference.random_inputs({{"batch", 10}}, 4);
  const TensorMap got = model.forward(in);
  CHECK(max_relative_error(got, reference.forward(in)) <= 1e-6);
  std::sort(replicas.begin(), replicas.end());
  CHECK(replicas == std::vector<std::string>{"cuda:0 [7, 2]", "cuda:1 [3, 2]"});
  // the hook's tensors are the replica's chunk of x and its rows of the output
  REQUIRE(replica_tensors.size() == 2);
  const std::span<const float> x = in.at("x").span<float>(), y = got.at("body.fc").span<float>();
  int64_t row = 0;
  for (const auto& [k, tensors] : replica_tensors) {
    const auto& [chunk, out] = tensors;
    REQUIRE(chunk.shape() == Shape{k == 0 ? 7 : 3, 4});
    REQUIRE(out.shape() == Shape{k == 0 ? 7 : 3, 2});
    CHECK(std::equal(chunk.span<float>().begin(), chunk.span<float>().end(), x.begin() + row * 4));
    CHECK(std::equal(out.span<float>().begin(), out.span<float>().end(), y.begin() + row * 2));
    row += chunk.shape()[0];
  }
  // a batch the sizes do not add up to: a clear error, from the API and the CLI (exit 2)
  CHECK_THROWS_WITH(model.forward(reference.random_inputs({{"batch", 8}}, 4)),
                    Catch::Contains("chunk_sizes add up to 10, but the batch being scattered has 8"));
  int code = 0;
  std::string out = run_program(std::string(TANDEM_CLI) + " run " + yaml + " --batch 8 --sim-gpus 2", &code);
  CHECK(code == 2);
  CHECK(out.find("chunk_sizes add up to 10") != std::string::npos);

  const std::string not_dp = write_yaml("parallel_no_dp", R"(name: parallel_no_dp
inputs:
  x: {shape: [batch, 4]}
targets:
  y: {shape: [batch], dtype: int64}
layers:
  - {name: fc, op: linear, in_features: 4, out_features: 3}
loss: {op: cross_entropy, input: fc, target: y, parallel: true}
)");
  CHECK_THROWS_WITH(Model::load(not_dp), Catch::Contains(":8:") && Catch::Contains("parallel: true computes the loss on each replica of a data_parallel block, but its input 'fc' is not made inside one"));
}

TEST_CASE("batch norm's running statistics come from replica 0 and from a placed GPU layer",
          "[multidevice][data_parallel]") {
  auto yaml_for = [](const std::string& tag, const std::string& wrap) {
    return write_yaml("bn_" + tag, R"(name: bn
inputs:
  x: {shape: [batch, 2, 4, 4]}
targets:
  label: {shape: [batch], dtype: int64}
layers:
  - name: body
)" + wrap + R"(
    layers:
      - {name: conv, op: conv2d, in_channels: 2, out_channels: 3, kernel_size: 3, padding: 1, bias: false}
      - {name: bn, op: batch_norm2d, num_features: 3}
      - {name: act, op: relu}
      - {name: flat, op: flatten}
      - {name: fc, op: linear, in_features: 48, out_features: 4}
loss: {op: cross_entropy, input: body.fc, target: label}
train:
  optimizer: {name: sgd, lr: 0.1}
)");
  };
  Bindings b{{"batch", 8}};
  // on one GPU (a placed layer): the running statistics and the weights are the cpu run's
  {
    const std::string yaml = yaml_for("gpu", "    device: cuda:0");
    Model reference = Model::load(yaml), model = Model::load(yaml);
    reference.to(Device::cpu());  // the single-device reference
    reference.init_parameters(2);
    model.init_parameters(2);
    model.use_devices(sim_gpus(1), policy());
    const TrainingSpec spec = *reference.graph().training;
    Trainer t_ref(reference, spec), t_gpu(model, spec);
    for (int step = 0; step < 5; ++step) {
      TensorMap d = reference.random_inputs(b, 60 + step);
      d.merge(reference.random_targets(b, 60 + step));
      double e = t_ref.step(d);
      CHECK(std::fabs(t_gpu.step(d) - e) <= 1e-5 * std::max(1.0, std::fabs(e)));
    }
    CHECK(max_relative_error(model.parameters(), reference.parameters()) <= 1e-5);  // buffers included
    REQUIRE(reference.parameters().at("body.bn.num_batches_tracked").to_vector<int64_t>() == std::vector<int64_t>{5});
    CHECK(model.parameters().at("body.bn.num_batches_tracked").to_vector<int64_t>() == std::vector<int64_t>{5});
  }
  // over two replicas: the master's running statistics are replica 0's, i.e. those of one
  // training forward over the first chunk's rows on one device
  {
    const std::string yaml = yaml_for("dp", "    data_parallel: {devices: [cuda:0, cuda:1], output_device: cuda:0}");
    Model chunk0 = Model::load(yaml), model = Model::load(yaml);
    chunk0.to(Device::cpu());  // the single-device reference
    chunk0.init_parameters(3);
    model.init_parameters(3);
    model.use_devices(sim_gpus(2), policy());
    TensorMap d = chunk0.random_inputs(b, 70);
    d.merge(chunk0.random_targets(b, 70));
    model.loss_and_backward(d, 0);
    TensorMap first_rows;
    for (const auto& [name, t] : d) {
      Shape shape = t.shape();
      shape[0] = 4;
      Tensor rows = Tensor::empty(shape, t.dtype());
      std::memcpy(rows.raw_data(), t.raw_data(), rows.nbytes());
      first_rows.emplace(name, rows);
    }
    chunk0.loss_and_backward(first_rows, 0);
    for (const char* buffer : {"body.bn.running_mean", "body.bn.running_var"}) {
      INFO(buffer);
      TensorMap got{{buffer, model.parameters().at(buffer)}}, want{{buffer, chunk0.parameters().at(buffer)}};
      CHECK(max_relative_error(got, want) <= 1e-5);
    }
    CHECK(model.parameters().at("body.bn.num_batches_tracked").to_vector<int64_t>() == std::vector<int64_t>{1});
  }
}

TEST_CASE("recurrent layers run placed and data-parallel along dim 1 as on the cpu", "[multidevice][data_parallel]") {
  // oneDNN's RNN primitives need their scratchpad on the thread that made them: the placed
  // executors make every kernel on the compute thread that runs it
  const std::string yaml = write_yaml("gru", R"(name: gru_dp
inputs:
  x: {shape: [6, batch, 5]}
targets:
  y: {shape: [6, batch, 4]}
layers:
  - name: rnn
    data_parallel: {devices: [cuda:0, cuda:1], output_device: cuda:0, dim: 1}
    layers:
      - {name: gru, op: gru, input_size: 5, hidden_size: 8, num_layers: 2}
      - {name: lstm, op: lstm, input_size: 8, hidden_size: 4}
loss: {op: mse_loss, input: rnn.lstm, target: y}
train:
  optimizer: {name: sgd, lr: 0.1}
)");
  Model reference = Model::load(yaml), model = Model::load(yaml);
  reference.to(Device::cpu());  // the single-device reference
  reference.init_parameters(8);
  model.init_parameters(8);
  model.use_devices(sim_gpus(2), policy());
  Bindings b{{"batch", 5}};
  TensorMap in = reference.random_inputs(b, 1);
  CHECK(max_relative_error(model.forward(in), reference.forward(in)) <= 1e-5);
  const TrainingSpec spec = *reference.graph().training;
  Trainer t_ref(reference, spec), t_dp(model, spec);
  for (int step = 0; step < 5; ++step) {
    TensorMap d = reference.random_inputs(b, 80 + step);
    d.merge(reference.random_targets(b, 80 + step));
    double e = t_ref.step(d);
    CHECK(std::fabs(t_dp.step(d) - e) <= 1e-5 * std::max(1.0, std::fabs(e)));
  }
  CHECK(max_relative_error(model.parameters(), reference.parameters()) <= 1e-5);
}

TEST_CASE("a replica's reshape may name the batch symbol: it means the replica's chunk, as x.size(0) in torch",
          "[multidevice][data_parallel]") {
  // DLRM's dot interaction: two inputs of [batch, 4] stacked as rows [batch, 2, 4] and as
  // columns [batch, 4, 2], multiplied; the batch is scattered, so `batch` inside the block
  // is each replica's chunk (uneven for 7 rows over 2 and 3 devices)
  const int devices = GENERATE(2, 3);
  const int64_t batch = GENERATE(7, 8);
  INFO(devices << " devices, batch " << batch);
  std::string yaml = write_yaml("reshape_" + std::to_string(devices), R"(name: dp_reshape
inputs:
  a: {shape: [batch, 4]}
  b: {shape: [batch, 4]}
targets:
  y: {shape: [batch, 1]}
layers:
  - name: top
    data_parallel: {devices: [)" + device_list(devices) + R"(], output_device: cuda:0, dim: 0}
    layers:
      - {name: flat, op: cat, inputs: [a, b], dim: 1}
      - {name: rows, op: reshape, shape: [batch, 2, 4]}
      - {name: col_a, op: reshape, inputs: a, shape: [batch, 4, 1]}
      - {name: col_b, op: reshape, inputs: b, shape: [batch, 4, 1]}
      - {name: cols, op: cat, inputs: [col_a, col_b], dim: 2}
      - {name: dots, op: matmul, inputs: [rows, cols]}
      - {name: pairs, op: reshape, shape: [batch, -1]}
      - {name: fc, op: linear, in_features: 4, out_features: 1}
loss: {op: binary_cross_entropy_with_logits, input: top.fc, target: y, parallel: true}
train:
  optimizer: {name: sgd, lr: 0.1}
)");
  Model reference = Model::load(yaml);
  reference.to(Device::cpu());  // the single-device reference
  Model model = Model::load(yaml);
  reference.init_parameters(5);
  model.init_parameters(5);
  model.use_devices(sim_gpus(devices), policy());
  Bindings b{{"batch", batch}};
  TensorMap inputs = reference.random_inputs(b, 3);
  CHECK(max_relative_error(model.forward(inputs), reference.forward(inputs)) <= 1e-5);
  TensorMap data = reference.random_inputs(b, 4);
  data.merge(reference.random_targets(b, 4));
  const TrainingSpec spec = *reference.graph().training;
  Trainer t_ref(reference, spec), t_dp(model, spec);
  for (int step = 0; step < 3; ++step) {
    const double want = t_ref.step(data), got = t_dp.step(data);
    CHECK(std::fabs(got - want) <= 1e-5 * std::max(1.0, std::fabs(want)));
  }
  CHECK(max_relative_error(model.parameters(), reference.parameters()) <= 1e-5);
  std::filesystem::remove(yaml);
}
