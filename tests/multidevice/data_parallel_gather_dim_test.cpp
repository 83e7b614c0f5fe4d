// A data_parallel block gathers each output along the dimension where that output carries
// the batch, which need not be the dim it scattered along (issue 30): a sequence-first block
// (dim 1) whose head gives [batch, classes], a batch-first block whose output puts the batch
// second. Each layout against the same model on the cpu: outputs, the loss and gradients of
// a step, gathered and parallel losses, and a few optimizer steps. Outputs that cannot be
// gathered are refused with the layer and the reason, never an internal error.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/random.h"
#include "graph/load_graph.h"
#include "multidevice_support.h"
#include "runtime/trainer.h"

using namespace tandem;
using namespace tandem::testing;

namespace {

std::string write_yaml(const std::string& tag, const std::string& text) {
  std::string path = (std::filesystem::temp_directory_path() /
                      ("tandem_gather_dim_" + tag + "_" + std::to_string(getpid()) + ".yaml")).string();
  std::ofstream(path) << text;
  return path;
}

// The issue's model: x [3, batch, 8] scattered along dim 1; the first step of the sequence,
// flattened to [batch, 8], through a head to [batch, 4]: the output carries the batch on dim 0.
std::string sequence_head_yaml(bool parallel) {
  return write_yaml(std::string("seq_head_") + (parallel ? "p" : "g"), std::string(R"(name: seq_head
inputs:
  x: {shape: [3, batch, 8]}
targets:
  label: {shape: [batch], dtype: int64}
layers:
  - name: net
    data_parallel: {devices: [cuda:0, cuda:1], output_device: cuda:0, dim: 1}
    layers:
      - {name: enc, op: linear, in_features: 8, out_features: 8}
      - {name: first, op: narrow, dim: 0, start: 0, length: 1}
      - {name: flat, op: flatten, start_dim: 0, end_dim: 1}
      - {name: head, op: linear, in_features: 8, out_features: 4}
outputs: [net.head, net.enc]
loss: {op: cross_entropy, input: net.head, target: label, parallel: )") + (parallel ? "true" : "false") + R"(}
train:
  optimizer: {name: adam, lr: 0.01}
)");
}

// Batch-first input, scattered along dim 0; the output [1, batch, 5] carries it on dim 1.
std::string batch_second_yaml() {
  return write_yaml("batch_second", R"(name: batch_second
inputs:
  x: {shape: [batch, 6]}
targets:
  y: {shape: [1, batch, 5]}
layers:
  - name: net
    data_parallel: {devices: [cuda:0, cuda:1, cuda:2], output_device: cpu}
    layers:
      - {name: fc, op: linear, in_features: 6, out_features: 5}
      - {name: lift, op: reshape, shape: [1, batch, 5]}
  - {name: out, op: tanh}
loss: {op: mse_loss, input: out, target: y}
train:
  optimizer: {name: sgd, lr: 0.1}
)");
}

/// A model without a loss: its outputs, and the input and parameter gradients of a backward
/// from fresh output gradients, on `devices` simulated GPUs as on the cpu alone.
void check_forward_backward_against_cpu(const std::string& yaml, int devices, const Bindings& b) {
  Model reference = Model::load(yaml);
  reference.to(Device::cpu());
  Model model = Model::load(yaml);
  reference.init_parameters(19);
  model.init_parameters(19);
  model.use_devices(sim_gpus(devices), policy());
  const TensorMap inputs = reference.random_inputs(b, 4);
  const TensorMap expected_out = reference.forward(inputs), got_out = model.forward(inputs);
  for (const auto& [name, t] : expected_out) CHECK(got_out.at(name).shape() == t.shape());
  CHECK(max_relative_error(got_out, expected_out) <= 1e-5);
  TensorMap grad_outputs;
  Rng rng(7);
  for (const auto& [name, t] : expected_out) {
    Tensor g = Tensor::empty(t.shape(), DType::float32);
    for (float& v : g.span<float>()) v = static_cast<float>(rng.normal());
    grad_outputs.emplace(name, std::move(g));
  }
  reference.zero_gradients();
  model.zero_gradients();
  const TensorMap expected_in = reference.backward(inputs, grad_outputs), got_in = model.backward(inputs, grad_outputs);
  CHECK(max_relative_error(got_in, expected_in) <= 1e-5);
  if (!reference.gradients().empty()) {
    REQUIRE(any_nonzero(reference.gradients()));
    CHECK(max_relative_error(model.gradients(), reference.gradients()) <= 1e-5);
  }
}

void check_against_cpu(const std::string& yaml, int devices, int64_t batch) {
  Model reference = Model::load(yaml);
  reference.to(Device::cpu());  // the single-device reference
  Model model = Model::load(yaml);
  reference.init_parameters(17);
  model.init_parameters(17);
  model.use_devices(sim_gpus(devices), policy());
  const Bindings b{{"batch", batch}};
  TensorMap inputs = reference.random_inputs(b, 1);
  const TensorMap expected_out = reference.forward(inputs), got_out = model.forward(inputs);
  for (const auto& [name, t] : expected_out) CHECK(got_out.at(name).shape() == t.shape());
  CHECK(max_relative_error(got_out, expected_out) <= 1e-5);

  TensorMap data = reference.random_inputs(b, 2);
  data.merge(reference.random_targets(b, 2));
  reference.zero_gradients();
  model.zero_gradients();
  const LossValue expected = reference.loss_and_backward(data, 0);
  const LossValue got = model.loss_and_backward(data, 0);
  CHECK(std::fabs(got.loss - expected.loss) <= 1e-5 * std::max(1.0, std::fabs(expected.loss)));
  REQUIRE(any_nonzero(reference.gradients()));
  CHECK(max_relative_error(model.gradients(), reference.gradients()) <= 1e-5);

  const TrainingSpec spec = *reference.graph().training;
  Trainer expected_trainer(reference, spec), got_trainer(model, spec);
  for (int step = 0; step < 5; ++step) {
    TensorMap d = reference.random_inputs(b, 50 + step);
    d.merge(reference.random_targets(b, 50 + step));
    const double e = expected_trainer.step(d);
    CHECK(std::fabs(got_trainer.step(d) - e) <= 1e-5 * std::max(1.0, std::fabs(e)));
  }
  CHECK(max_relative_error(model.parameters(), reference.parameters()) <= 1e-5);
}

}  // namespace

TEST_CASE("a block scattered along dim 1 gathers an output that carries the batch on dim 0",
          "[multidevice][data_parallel]") {
  const bool parallel = GENERATE(false, true);
  const int64_t batch = GENERATE(4, 5);
  INFO((parallel ? "parallel" : "gathered") << " loss, batch " << batch);
  check_against_cpu(sequence_head_yaml(parallel), 2, batch);
}

TEST_CASE("a block scattered along dim 0 gathers an output that carries the batch on dim 1",
          "[multidevice][data_parallel]") {
  const int64_t batch = GENERATE(6, 7, 2);
  INFO("batch " << batch);
  check_against_cpu(batch_second_yaml(), 3, batch);
}

TEST_CASE("a data_parallel output that cannot be gathered is refused at load with the layer and the reason",
          "[multidevice][data_parallel]") {
  // no dimension follows the batch: the replicas' results are not shares of the whole
  const std::string no_batch = write_yaml("no_batch", R"(name: no_batch
inputs:
  x: {shape: [batch, 8]}
layers:
  - name: net
    data_parallel: {devices: [cuda:0, cuda:1]}
    layers:
      - {name: fc, op: linear, in_features: 8, out_features: 8}
      - {name: one, op: narrow, dim: 0, start: 0, length: 1}
)");
  CHECK_THROWS_AS(Model::load(no_batch), ModelError);
  CHECK_THROWS_WITH(Model::load(no_batch), Catch::Contains(":9:") && Catch::Contains("layer 'net.one'") &&
                                               Catch::Contains("cannot be gathered") &&
                                               Catch::Contains("no dimension that follows the scattered 'batch'"));
  // the batch inside a flattened dimension, not its outer factor: 3 runs of the batch, which
  // the gather takes run by run (a reshape that mixes the samples is refused: below)
  const std::string interleaved = write_yaml("interleaved", R"(name: interleaved
inputs:
  x: {shape: [3, batch, 8]}
layers:
  - name: net
    data_parallel: {devices: [cuda:0, cuda:1], dim: 1}
    layers:
      - {name: flat, op: flatten, start_dim: 0, end_dim: 1}
)");
  for (int devices : {2, 3}) check_forward_backward_against_cpu(interleaved, devices, {{"batch", 5}});
  int code = 0;
  const std::string out =
      run_program(std::string(TANDEM_CLI) + " run " + interleaved + " --sim-gpus 2 --batch 4", &code);
  CHECK(code == 0);
  CHECK(out.find("internal error") == std::string::npos);
}

TEST_CASE("with fixed shapes the replicas' shapes tell the gather dim, or the run is refused",
          "[multidevice][data_parallel]") {
  // [3, 4, 8] scattered along dim 1: its first step [4, 8] holds each replica's rows on dim 0
  const std::string fixed = write_yaml("fixed", R"(name: fixed
inputs:
  x: {shape: [3, 4, 8]}
layers:
  - name: net
    data_parallel: {devices: [cuda:0, cuda:1], dim: 1}
    layers:
      - {name: first, op: narrow, dim: 0, start: 0, length: 1}
      - {name: flat, op: flatten, start_dim: 0, end_dim: 1}
      - {name: fc, op: linear, in_features: 8, out_features: 2}
)");
  Model reference = Model::load(fixed), model = Model::load(fixed);
  reference.to(Device::cpu());
  reference.init_parameters(2);
  model.init_parameters(2);
  model.use_devices(sim_gpus(2), policy());
  TensorMap in = reference.random_inputs({}, 3);
  CHECK(max_relative_error(model.forward(in), reference.forward(in)) <= 1e-6);

  // flattened across the batch: 3 runs of the batch, gathered run by run
  const std::string across = write_yaml("across", R"(name: across
inputs:
  x: {shape: [3, 4, 8]}
layers:
  - name: net
    data_parallel: {devices: [cuda:0, cuda:1], dim: 1}
    layers:
      - {name: flat, op: flatten, start_dim: 0, end_dim: 1}
)");
  // the order of its rows is followed with the fixed extent as a symbol
  check_forward_backward_against_cpu(across, 2, {});
  int code = 0;
  const std::string out = run_program(std::string(TANDEM_CLI) + " run " + across + " --sim-gpus 2", &code);
  CHECK(code == 0);
  CHECK(out.find("internal error") == std::string::npos);
}

TEST_CASE("a parallel loss scores a sequence model's flattened logits that no gather could put in order",
          "[multidevice][data_parallel]") {
  // [3, batch, 8] cut along dim 1, logits [3·batch, 4] flattened across the batch: training
  // scores each replica's rows against its rows of the target [3, batch]; inference gathers
  // them run by run
  const std::string yaml = write_yaml("seq_lm", R"(name: seq_lm
inputs:
  x: {shape: [3, batch, 8]}
targets:
  y: {shape: [3, batch], dtype: int64}
layers:
  - name: net
    data_parallel: {devices: [cuda:0, cuda:1], dim: 1}
    layers:
      - {name: enc, op: linear, in_features: 8, out_features: 8}
      - {name: flat, op: flatten, start_dim: 0, end_dim: 1}
      - {name: head, op: linear, in_features: 8, out_features: 4}
loss: {op: cross_entropy, input: net.head, target: y, parallel: true}
train:
  optimizer: {name: sgd, lr: 0.1}
)");
  Model reference = Model::load(yaml), model = Model::load(yaml);
  reference.to(Device::cpu());
  reference.init_parameters(21);
  model.init_parameters(21);
  model.use_devices(sim_gpus(2), policy());
  const Bindings b{{"batch", 5}};
  const TrainingSpec spec = *reference.graph().training;
  Trainer expected_trainer(reference, spec), got_trainer(model, spec);
  for (int step = 0; step < 4; ++step) {
    TensorMap d = reference.random_inputs(b, 30 + step);
    d.merge(reference.random_targets(b, 30 + step));
    const double e = expected_trainer.step(d);
    CHECK(std::fabs(got_trainer.step(d) - e) <= 1e-5 * std::max(1.0, std::fabs(e)));
  }
  CHECK(max_relative_error(model.parameters(), reference.parameters()) <= 1e-5);
  const TensorMap in = reference.random_inputs(b, 1);
  CHECK(max_relative_error(model.forward(in), reference.forward(in)) <= 1e-5);
}

// cat along the batch's dimension inside a block makes [2*batch, 8] as a flatten of
// [batch, 2, 8] would, but with all of a's samples before all of b's: concatenating the
// replicas' outputs would interleave them wrongly. The order of the samples is followed
// layer by layer (graph/sample_order.h): refused at load where the gather cannot undo it,
// gathered right where a later layer puts the batch back in a dimension of its own.
TEST_CASE("a cat along the batch's dimension inside a block is refused unless a layer puts the batch back in order",
          "[multidevice][data_parallel]") {
  auto cat_yaml = [](const std::string& tag, const std::string& x, int64_t dim, const std::string& after) {
    return write_yaml("cat_" + tag, "name: cat_" + tag + R"(
inputs:
  x: {shape: )" + x + R"(}
layers:
  - name: net
    data_parallel: {devices: [cuda:0, cuda:1], dim: )" + std::to_string(dim) + R"(}
    layers:
      - {name: a, op: linear, in_features: 8, out_features: 8}
      - {name: b, op: tanh, inputs: [x]}
      - {name: both, op: cat, dim: )" + std::to_string(dim) + R"(, inputs: [a, b]}
)" + after);
  };
  struct Refused {
    std::string tag, x;
    int64_t dim;
    std::string after, layer, reason;
  };
  const std::vector<Refused> refused = {
      // a reshape that splits the batch's index across dimensions: no gather undoes it
      {"split", "[batch, 8]", 0, "      - {name: cut, op: reshape, shape: [4, batch, 4]}\n", "net.cut",
       "splits the batch's index"},
  };
  // The batch in 2 runs (all of a's samples, then all of b's): gathered run by run, as on
  // the cpu alone; the same with a fixed batch (no symbol tells the shapes apart), with a
  // layer after the cat, and in a sequence-first block cut along dim 1.
  struct InRuns {
    std::string tag, x;
    int64_t dim;
    std::string after;
    Bindings bindings;
  };
  for (const InRuns& r : std::vector<InRuns>{{"rows", "[batch, 8]", 0, "", {{"batch", 5}}},
                                             {"fixed", "[6, 8]", 0, "", {}},
                                             {"then_relu", "[batch, 8]", 0, "      - {name: act, op: relu}\n", {{"batch", 7}}},
                                             {"seq", "[3, batch, 8]", 1, "", {{"batch", 5}}}}) {
    for (int devices : {2, 3}) {
      INFO(r.tag << " over " << devices << " simulated GPUs");
      check_forward_backward_against_cpu(cat_yaml(r.tag, r.x, r.dim, r.after), devices, r.bindings);
    }
  }
  for (const Refused& r : refused) {
    INFO(r.tag);
    const std::string yaml = cat_yaml(r.tag, r.x, r.dim, r.after);
    CHECK_THROWS_AS(Model::load(yaml), ModelError);
    CHECK_THROWS_WITH(Model::load(yaml), Catch::Contains("cannot be gathered") && Catch::Contains(r.layer) &&
                                             Catch::Contains(r.reason));
    int code = 0;
    const std::string out = run_program(std::string(TANDEM_CLI) + " check " + yaml, &code);
    CHECK(code == 2);
    CHECK(out.find("cannot be gathered") != std::string::npos);
    CHECK(out.find("internal error") == std::string::npos);
  }

  // Accepted, and computed as on the cpu alone: a cat along another dimension; a cat along
  // the batch's undone by a reshape to [2, batch, 8] (gathered along dim 1); the same with
  // a fixed batch.
  struct Accepted {
    std::string tag, x, after, target;
    int64_t batch;
  };
  const std::vector<Accepted> accepted = {
      {"features", "[batch, 8]", "", "[batch, 16]", 5},
      {"undone", "[batch, 8]", "      - {name: split, op: reshape, shape: [2, batch, 8]}\n", "[2, batch, 8]", 5},
      {"undone_fixed", "[6, 8]", "      - {name: split, op: reshape, shape: [2, -1, 8]}\n", "[2, 6, 8]", 6},
  };
  for (const Accepted& a : accepted) {
    INFO(a.tag);
    const bool features = a.tag == "features";
    std::string yaml_text;
    {
      std::ifstream in(cat_yaml(a.tag, a.x, 0, a.after));
      yaml_text.assign(std::istreambuf_iterator<char>(in), {});
    }
    if (features) {  // the same layers, concatenated along dim 1
      const std::string from = "op: cat, dim: 0", to = "op: cat, dim: 1";
      yaml_text.replace(yaml_text.find(from), from.size(), to);
    }
    const std::string last = features ? "net.both" : "net.split";
    const std::string yaml = write_yaml("cat_" + a.tag + "_trained", yaml_text + "targets:\n  y: {shape: " + a.target +
                                                                      "}\nloss: {op: mse_loss, input: " + last +
                                                                      ", target: y}\ntrain:\n  optimizer: {name: sgd, lr: 0.1}\n");
    check_against_cpu(yaml, 2, a.batch);
  }
}
