// Multi-device training: a training place() plan run over the cpu and simulated GPUs gives
// the all-cpu outputs, gradients and, after optimizer steps, weights; activations cross
// forward and their gradients cross back, counted.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"
#include "runtime/devices/device_registry.h"
#include "runtime/model.h"
#include "multidevice_support.h"
#include "runtime/trainer.h"
#include "../unit/unit_test_support.h"

using namespace tandem;
using namespace tandem::testing;

namespace {

std::string config(const std::string& name) { return std::string(TANDEM_SOURCE_DIR) + "/configs/" + name; }

// The seeds' mixed model with a loss and a train: section.
std::string mixed_training_yaml() {  // one file per process: ctest may run test cases in parallel
  std::string path =
      (std::filesystem::temp_directory_path() / ("tandem_seed_mixed_train_" + std::to_string(getpid()) + ".yaml")).string();
  std::ofstream(path) << R"(name: seed_mixed_train
inputs:
  tokens: {shape: [batch], dtype: int64}
targets:
  label: {shape: [batch], dtype: int64}
layers:
  - {name: embedding, op: embedding, num_embeddings: 1000, embedding_dim: 10, device: cpu}
  - {name: rnn, op: linear, in_features: 10, out_features: 10, device: cuda:0}
loss: {op: cross_entropy, input: rnn, target: label}
train:
  batch: 32
  optimizer: {name: sgd, lr: 0.1, momentum: 0.9}
)";
  return path;
}

TensorMap copy_of(const TensorMap& m) {
  TensorMap out;
  for (const auto& [name, t] : m) {
    Tensor c = Tensor::empty(t.shape(), t.dtype());
    std::memcpy(c.raw_data(), t.raw_data(), t.nbytes());
    out.emplace(name, std::move(c));
  }
  return out;
}

const DeviceReport& entry(const std::vector<DeviceReport>& report, Device d) {
  for (const DeviceReport& r : report)
    if (r.device == d) return r;
  FAIL("no report for " + d.str());
  return report.front();
}

struct Result {
  int code;
  std::string output;
};

Result run_cli(const std::string& args) {
  std::string cmd = "env -u TANDEM_SIM_GPUS -u TANDEM_SIM_GPU_MEMORY " + std::string(TANDEM_CLI) + " " + args + " 2>/dev/null";
  FILE* pipe = popen(cmd.c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::string out;
  std::array<char, 4096> buf;
  while (size_t n = fread(buf.data(), 1, buf.size(), pipe)) out.append(buf.data(), n);
  int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

}  // namespace

TEST_CASE("the mixed seed model trains over simulated GPUs as on the cpu", "[multidevice][train]") {
  const int gpus = GENERATE(1, 2);
  INFO(gpus << " simulated GPUs");
  const int64_t batch = 32;
  const std::string yaml = mixed_training_yaml();
  Model reference = Model::load(yaml);
  reference.to(Device::cpu());  // the single-device reference
  Model model = Model::load(yaml);
  model.use_devices(sim_gpus(gpus), policy());
  const TrainingSpec spec = *reference.graph().training;

  Bindings b{{"batch", batch}};
  TensorMap batch_data = reference.random_inputs(b, 5);
  batch_data.merge(reference.random_targets(b, 5));
  TensorMap inputs{{"tokens", batch_data.at("tokens")}};

  // outputs
  CHECK(max_relative_error(model.forward(inputs), reference.forward(inputs)) <= 1e-6);

  // every parameter gradient after one backward
  reference.zero_gradients();
  model.zero_gradients();
  LossValue expected_loss = reference.loss_and_backward(batch_data, 3);
  LossValue got_loss = model.loss_and_backward(batch_data, 3);
  CHECK(std::fabs(got_loss.loss - expected_loss.loss) <= 1e-6 * std::fabs(expected_loss.loss));
  CHECK(got_loss.correct == expected_loss.correct);
  REQUIRE(any_nonzero(reference.gradients()));
  CHECK(max_relative_error(model.gradients(), reference.gradients()) <= 1e-6);

  // the plan: embedding on the cpu, the linear layer and the loss on cuda:0
  const Plan& plan = model.last_plan();
  REQUIRE(plan.training);
  REQUIRE(plan.steps.size() == 2);
  CHECK(plan.steps[0].device == Device::cpu());
  CHECK(plan.steps[1].device == Device::cuda(0));

  // the device report of the step: the activation went cpu -> cuda:0 (with the target) and
  // its gradient came back cuda:0 -> cpu. The linear layer's parameters are cuda:0's alone
  // (Note [where a master lives]): their gradients stay there, and the optimizer updates
  // them there; only in the first training step did their gradients so far (the host's)
  // go up to it (their weights went up with the forward above).
  auto check_step_copies = [&](bool first_training_step) {
    auto report = model.device_report();
    REQUIRE(report.size() == 2);
    const DeviceReport& cpu = entry(report, Device::cpu());
    const DeviceReport& gpu = entry(report, Device::cuda(0));
    const size_t activation = batch * 10 * 4, target = batch * 8, parameters = (10 * 10 + 10) * 4;
    const size_t up = first_training_step ? parameters : 0;
    const int64_t ups = first_training_step ? 2 : 0;
    CHECK(cpu.copies_out == 2 + ups);
    CHECK(cpu.bytes_out == activation + target + up);
    CHECK(gpu.copies_in == 2 + ups);
    CHECK(gpu.bytes_in == activation + target + up);
    CHECK(cpu.copies_in == 1);
    CHECK(cpu.bytes_in == activation);
    CHECK(gpu.copies_out == 1);
    CHECK(gpu.bytes_out == activation);
    CHECK(gpu.busy_seconds > 0);
  };
  check_step_copies(true);

  // gradients accumulate across backward calls as on the cpu
  reference.loss_and_backward(batch_data, 4);
  model.loss_and_backward(batch_data, 4);
  CHECK(max_relative_error(model.gradients(), reference.gradients()) <= 1e-6);

  // weights after 20 optimizer steps (sgd with momentum), batches drawn per step
  Trainer expected_trainer(reference, spec);
  Trainer got_trainer(model, spec);
  for (int step = 0; step < 20; ++step) {
    TensorMap data = reference.random_inputs(b, 100 + step);
    data.merge(reference.random_targets(b, 100 + step));
    double expected = expected_trainer.step(data);
    double got = got_trainer.step(data);
    CHECK(std::fabs(got - expected) <= 1e-6 * std::max(1.0, std::fabs(expected)));
    check_step_copies(false);
  }
  CHECK(max_relative_error(model.parameters(), reference.parameters()) <= 1e-6);
  // the device copy of the linear layer's weights follows the optimizer: outputs still agree
  CHECK(max_relative_error(model.forward(inputs), reference.forward(inputs)) <= 1e-6);
  // cuda:0 holds one copy of the weights, shared by inference and training, one gradient
  // buffer and the momentum buffers: not a second copy of the weights
  const size_t parameters = (10 * 10 + 10) * 4;
  const DeviceReport gpu = entry(model.device_report(), Device::cuda(0));  // a copy: the report is a temporary
  CHECK(gpu.current_bytes >= 3 * parameters);
  CHECK(gpu.current_bytes < 3 * parameters + 384);  // rounded to 64-byte size classes

  // evaluation runs placed too, and agrees
  LossValue expected_eval = reference.evaluate_loss(batch_data);
  LossValue got_eval = model.evaluate_loss(batch_data);
  CHECK(std::fabs(got_eval.loss - expected_eval.loss) <= 1e-6 * std::fabs(expected_eval.loss));
  std::filesystem::remove(yaml);
}

TEST_CASE("the recommender with embeddings on the cpu over 2 GPUs has the single-device gradients",
          "[multidevice][train]") {
  Model reference = Model::load(config("recommender.yaml"));
  reference.to(Device::cpu());  // the single-device reference
  TensorMap inputs = reference.random_inputs({{"batch", 16}, {"tags", 40}}, 3);
  TensorMap outputs = reference.forward(inputs);
  TensorMap grad_outputs;
  for (const auto& [name, t] : outputs) {
    Tensor g = Tensor::empty(t.shape(), DType::float32);
    auto span = g.span<float>();
    for (size_t i = 0; i < span.size(); ++i) span[i] = 0.25f + 0.01f * static_cast<float>(i % 17);
    grad_outputs.emplace(name, std::move(g));
  }
  reference.zero_gradients();
  TensorMap expected_input_grads = copy_of(reference.backward(inputs, grad_outputs));

  Model model = Model::load(config("recommender.yaml"));
  PlacementPolicy p = policy("embeddings-on-cpu");
  p.max_memory = 40 * 1024;  // small enough that the dense layers spread over both GPUs
  model.use_devices(sim_gpus(2), p);
  model.zero_gradients();
  TensorMap got_input_grads = model.backward(inputs, grad_outputs);
  REQUIRE(any_nonzero(reference.gradients()));
  CHECK(max_relative_error(model.gradients(), reference.gradients()) <= 1e-6);
  CHECK(max_relative_error(got_input_grads, expected_input_grads) <= 1e-6);

  const Plan& plan = model.last_plan();
  REQUIRE(plan.training);
  bool some_on_gpu = false;
  for (const OpStep& s : plan.steps) {
    const Node& node = model.graph().nodes[s.node];
    if (node.op == "embedding_bag") CHECK(s.device == Device::cpu());
    some_on_gpu |= s.device.kind == DeviceKind::cuda;
  }
  CHECK(some_on_gpu);
  bool on_cuda1 = false;  // the small budget spreads the dense layers: a gradient crosses GPU to GPU
  for (const OpStep& s : plan.steps) on_cuda1 |= s.device == Device::cuda(1);
  CHECK(on_cuda1);
  // gradients came back from the GPUs
  bool gradient_copied_to_cpu = false;
  for (const DeviceReport& r : model.device_report())
    if (r.device == Device::cpu()) gradient_copied_to_cpu = r.copies_in > 0;
  CHECK(gradient_copied_to_cpu);
}

TEST_CASE("tandem train --sim-gpus 2 --placement balanced reaches the cpu run's validation accuracy",
          "[multidevice][cli][train]") {
  const std::string args = config("digits_mlp.yaml") + " --json";  // the full run: 30 epochs, under a second
  Result cpu = run_cli("train " + args);
  REQUIRE(cpu.code == 0);
  Result placed = run_cli("train " + args + " --sim-gpus 2 --placement balanced");
  REQUIRE(placed.code == 0);
  auto a = nlohmann::json::parse(tandem::testing::json_summary(cpu.output));
  auto b = nlohmann::json::parse(tandem::testing::json_summary(placed.output));
  REQUIRE(a.contains("validation_accuracy"));
  CHECK(b["validation_accuracy"].get<double>() == a["validation_accuracy"].get<double>());
  CHECK(b["steps"] == a["steps"]);
  CHECK_FALSE(a.contains("devices"));
  REQUIRE(b.contains("devices"));
  // the whole run's traffic: every step's batch goes up (inputs and targets), and nothing
  // comes back: the GPU holds the weights, their gradients and Adam's state (Note [where a
  // master lives]); only the loss's value is read
  bool on_gpu = false;
  for (const auto& d : b["devices"]) {
    if (d["device"] != "cuda:0") continue;
    on_gpu = true;
    CHECK(d["busy_ms"].get<double>() > 0);
    CHECK(d["copies_in"].get<int64_t>() >= 2 * b["steps"].get<int64_t>());
    CHECK(d["copies_out"].get<int64_t>() == 0);
    CHECK(d["peak_bytes"].get<int64_t>() > 0);
  }
  CHECK(on_gpu);
  double la = a["epochs"].back()["validation_loss"].get<double>();
  double lb = b["epochs"].back()["validation_loss"].get<double>();
  CHECK(std::fabs(la - lb) <= 1e-4 * std::fabs(la));
}

TEST_CASE("placed training out of GPU memory throws OutOfMemory naming the layer and the next step works",
          "[multidevice][train]") {
  const std::string yaml = mixed_training_yaml();
  Model model = Model::load(yaml);
  model.use_devices(sim_gpus(1, 4 * 1024), policy());
  Bindings big{{"batch", 512}}, small{{"batch", 4}};
  TensorMap data = model.random_inputs(big, 1);
  data.merge(model.random_targets(big, 1));
  try {
    model.loss_and_backward(data, 0);
    FAIL("expected OutOfMemory");
  } catch (const OutOfMemory& e) {
    CHECK_THAT(e.what(), Catch::Contains("layer 'rnn' (linear)"));
  }
  TensorMap fits = model.random_inputs(small, 2);
  fits.merge(model.random_targets(small, 2));
  Model reference = Model::load(yaml);
  reference.to(Device::cpu());  // the single-device reference
  model.zero_gradients();
  reference.zero_gradients();
  model.loss_and_backward(fits, 0);
  reference.loss_and_backward(fits, 0);
  CHECK(max_relative_error(model.gradients(), reference.gradients()) <= 1e-6);
  std::filesystem::remove(yaml);
}

TEST_CASE("tandem train --report prints what each device did over the whole run", "[multidevice][cli][train]") {
  Result r = run_cli("train " + config("digits_mlp.yaml") + " --epochs 2 --sim-gpus 1 --placement balanced --report");
  REQUIRE(r.code == 0);
  auto at = r.output.find("per device (whole run");
  REQUIRE(at != std::string::npos);
  std::string table = r.output.substr(at);
  CHECK(table.find("\n  cpu ") != std::string::npos);
  CHECK(table.find("\n  cuda:0 ") != std::string::npos);
  CHECK(table.find("MiB") != std::string::npos);  // two epochs of batches, weights and gradients
  // --report alone places the model (on the registry's devices: none here, so all on the cpu)
  Result alone = run_cli("train " + config("digits_mlp.yaml") + " --epochs 1 --report");
  REQUIRE(alone.code == 0);
  CHECK(alone.output.find("per device (whole run") != std::string::npos);
}

namespace {

// A table on the cpu (row-sparse updates), one inside a data-parallel block (its replicas'
// gradients come back from the GPUs whole), and a data-parallel head with a parallel loss.
std::string tables_yaml() {
  std::string path =
      (std::filesystem::temp_directory_path() / ("tandem_tables_dp_" + std::to_string(getpid()) + ".yaml")).string();
  std::ofstream(path) << R"(name: tables_dp
inputs:
  ids: {shape: [batch, 2], dtype: int64}
  word: {shape: [batch], dtype: int64}
targets:
  y: {shape: [batch, 1]}
layers:
  - {name: table, op: embedding_bag, inputs: ids, num_embeddings: 100000, embedding_dim: 8, mode: sum, device: cpu}
  - name: head
    data_parallel: {devices: [cuda:0, cuda:1], output_device: cuda:0, dim: 0}
    layers:
      - {name: words, op: embedding, inputs: word, num_embeddings: 30, embedding_dim: 8}
      - {name: both, op: cat, inputs: [table, words], dim: 1}
      - {name: fc, op: linear, in_features: 16, out_features: 1}
loss: {op: binary_cross_entropy_with_logits, input: head.fc, target: y, parallel: true}
train:
  batch: 12
  optimizer: {name: sgd, lr: 0.5}
)";
  return path;
}

}  // namespace

TEST_CASE("placed training updates the cpu's table row by row and takes GPU gradients whole, as on the cpu",
          "[multidevice][train][touched_rows]") {
  const std::string yaml = tables_yaml();
  Model reference = Model::load(yaml);
  reference.to(Device::cpu());  // the single-device reference
  Model model = Model::load(yaml);
  const uint64_t seed = static_cast<uint64_t>(getpid()) % 1000;  // fresh weights and batches per run
  INFO("seed " << seed);
  reference.init_parameters(seed);
  model.init_parameters(seed);
  model.use_devices(sim_gpus(2), policy());
  const TrainingSpec spec = *reference.graph().training;
  Trainer expected(reference, spec), got(model, spec);
  // a NaN in a table row no batch looks up: neither zeroing nor the update may read it
  // (clipping may: its exact norm sums the kNormBlock-element blocks that hold a touched row)
  const Tensor& grad = model.gradients().at("table.weight");
  grad.data<float>()[99999 * 8] = std::nanf("");
  for (int step = 0; step < 5; ++step) {
    TensorMap batch = reference.random_inputs({{"batch", 12}}, seed * 10 + step);
    for (int64_t& id : batch.at("ids").span<int64_t>()) id %= 99999;  // never the poisoned row
    batch.merge(reference.random_targets({{"batch", 12}}, seed * 10 + step));
    const double want = expected.step(batch), loss = got.step(batch);
    CHECK(std::fabs(loss - want) <= 1e-5 * std::max(1.0, std::fabs(want)));
    const TouchedRows& table = model.gradient_rows().at("table.weight");
    CHECK_FALSE(table.all());
    CHECK(table.count() <= 24);
    CHECK(model.gradient_rows().at("head.words.weight").all());  // reduced from the replicas
    CHECK(model.gradient_rows().at("head.fc.weight").all());
  }
  CHECK(std::isnan(grad.data<float>()[99999 * 8]));
  grad.data<float>()[99999 * 8] = 0.0f;
  CHECK(max_relative_error(model.parameters(), reference.parameters()) <= 1e-5);
  std::filesystem::remove(yaml);
}
