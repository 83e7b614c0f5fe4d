// Pipelined micro-batches (train: pipeline: {micro_batches: M}, runtime/exec/pipeline.h):
// a split model (tables on the cpu, the MLP on simulated GPUs) trained with its batches cut
// into micro-batches ends at the weights of the same model trained on whole batches, step
// by step; the micro-batches really flow one behind the other (every forward on a lane
// before any backward); and what micro-batches would change (batch norm) is refused.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "backends/trace.h"
#include "core/error.h"
#include "graph/load_graph.h"
#include "multidevice_support.h"
#include "runtime/model.h"
#include "runtime/trainer.h"

using namespace tandem;
using namespace tandem::testing;

namespace {

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("tandem_pipeline_" + std::to_string(getpid()) + "_" + name)).string();
}

std::string write(const std::string& name, const std::string& text) {
  const std::string path = temp_path(name);
  std::ofstream(path) << text;
  return path;
}

/// A recommender's shape: a table and a dense layer on the cpu, the MLP on cuda:0 (or, with
/// `data_parallel`, data-parallel over cuda:0 and cuda:1), `train:` as given.
std::string split_yaml(const std::string& name, const std::string& table, bool data_parallel, const std::string& train) {
  std::string mlp = data_parallel ? R"(  - name: top
    data_parallel: {devices: [cuda:0, cuda:1]}
    layers:
      - {name: fc1, op: linear, in_features: 32, out_features: 32}
      - {name: act, op: relu}
      - {name: fc2, op: linear, in_features: 32, out_features: 5}
)"
                                  : R"(  - {name: fc1, op: linear, in_features: 32, out_features: 32, device: "cuda:0"}
  - {name: act, op: relu, device: "cuda:0"}
  - {name: fc2, op: linear, in_features: 32, out_features: 5, device: "cuda:0"}
)";
  return write(name + ".yaml", R"(name: split_pipeline
inputs:
  dense: {shape: [batch, 8]}
  item_ids: {shape: [batch, 4], dtype: int64}
targets:
  label: {shape: [batch], dtype: int64}
layers:
  - {name: items, op: embedding_bag, inputs: item_ids, num_embeddings: 300, embedding_dim: 16, mode: sum, device: cpu)" +
                              table + R"(}
  - {name: bottom, op: linear, inputs: dense, in_features: 8, out_features: 16, device: cpu}
  - {name: features, op: cat, inputs: [bottom, items], dim: 1}
)" + mlp + "loss: {op: cross_entropy, input: " +
                              (data_parallel ? "top" : "fc2") + ", target: label}\ntrain:\n" + train);
}

struct Variant {
  std::string name, table, train;
  double weight_tolerance;  // of the weights after the run, relative to each tensor's largest
};

std::vector<Variant> variants() {
  return {
      // micro-batches sum each gradient in another order: sgd moves a weight by lr times that
      // rounding
      {"sgd with momentum", "", "  optimizer: {name: sgd, lr: 0.1, momentum: 0.9}\n", 1e-6},
      // Adam divides each gradient by its running size: eps 1e-4 keeps a gradient that is
      // rounding noise (a nearly cancelled sum, whose noise the order of the sums changes)
      // from moving its weight by lr (the distributed tests' reason too). What is left still
      // moves a weight by up to lr * rounding / eps: close to 1e-6 of the weights after 4
      // steps (0.86e-6 with gcc, 1.13e-6 under clang's TSan). A lost micro-batch turns the
      // gradient, far past 1e-5; the sgd variant, which Adam's scale-free step cannot, catches
      // a misscaled one.
      {"adam", "", "  optimizer: {name: adam, lr: 0.01, eps: 1.0e-4}\n", 1e-5},
      {"a sparse table with rowwise_adagrad, the rest adam", ", sparse: true",
       "  optimizer: {name: adam, lr: 0.01, eps: 1.0e-4}\n  optimizer_groups:\n    - {params: [items.*], name: "
       "rowwise_adagrad, lr: 0.05}\n",
       1e-5},
  };
}

TensorMap batch_of(Model& model, int64_t batch, uint64_t seed) {
  Bindings b{{"batch", batch}};
  TensorMap data = model.random_inputs(b, seed);
  data.merge(model.random_targets(b, seed));
  return data;
}

/// The model's weights now, copied (training goes on updating the model's own).
TensorMap copy_of_parameters(Model& model) {
  TensorMap weights;
  for (const auto& [name, t] : model.parameters()) {
    Tensor copy = Tensor::empty(t.shape(), t.dtype());
    std::memcpy(copy.raw_data(), t.raw_data(), t.nbytes());
    weights.emplace(name, std::move(copy));
  }
  return weights;
}

struct Trained {
  std::vector<double> losses;
  TensorMap weights;
  DeviceReport cpu;  // what crossed to and from the cpu over the run
};

/// Trains `steps` steps on the batches seeded 100, 101, ...
Trained train(const std::string& yaml, int gpus, int64_t micro_batches, int64_t batch,
                                                int steps) {
  Model model = Model::load(yaml);
  model.use_devices(sim_gpus(gpus), policy());
  TrainingSpec spec = *model.graph().training;
  spec.micro_batches = micro_batches;
  Trainer trainer(model, spec);
  std::vector<double> losses;
  for (int s = 0; s < steps; ++s) losses.push_back(trainer.step(batch_of(model, batch, 100 + static_cast<uint64_t>(s))));
  TensorMap weights = copy_of_parameters(model);
  DeviceReport cpu;
  for (const DeviceReport& r : model.device_totals())
    if (r.device == Device::cpu()) cpu = r;
  return {losses, weights, cpu};
}

}  // namespace

TEST_CASE("pipelined micro-batches train a split model to the weights of whole batches", "[multidevice][train][pipeline]") {
  const bool data_parallel = GENERATE(false, true);
  for (const Variant& v : variants()) {
    INFO(v.name << (data_parallel ? ", the MLP data-parallel over two simulated GPUs" : ", the MLP on a simulated GPU"));
    const std::string yaml = split_yaml("train", v.table, data_parallel, v.train);
    const int gpus = data_parallel ? 2 : 1;
    const int64_t batch = 37;  // cut unevenly: 13+12+12, 10+9+9+9, ...
    const int steps = 4;
    const Trained whole = train(yaml, gpus, 1, batch, steps);
    for (int64_t m : {2, 3, 4}) {
      INFO(m << " micro-batches");
      const Trained cut = train(yaml, gpus, m, batch, steps);
      for (int s = 0; s < steps; ++s) {
        INFO("step " << s << ": whole batches " << whole.losses[s] << ", micro-batches " << cut.losses[s]);
        CHECK(std::fabs(cut.losses[s] - whole.losses[s]) <= 1e-6 * std::fabs(whole.losses[s]));
      }
      CHECK(max_relative_error(cut.weights, whole.weights) <= v.weight_tolerance);
      // the same activations and gradients crossed, in smaller pieces (the report counts
      // every micro-batch's share)
      REQUIRE(whole.cpu.bytes_in > 0);
      CHECK(cut.cpu.bytes_in == whole.cpu.bytes_in);
      CHECK(cut.cpu.bytes_out == whole.cpu.bytes_out);
    }
  }
}

TEST_CASE("a pipelined step runs its micro-batches in 1F1B order: as many in flight as the plan has segments", "[multidevice][train][pipeline]") {
  // A lane runs its tasks in the order the host gave them: whole batches accumulated in parts
  // run forward, backward, forward, backward on the GPU; pipelined micro-batches through the
  // plan's 2 segments (the cpu's tables, the GPU's MLP) run two forwards, then a backward
  // before each next forward, so that at most two micro-batches' activations are held. The
  // trace shows each lane's order.
  const std::string trace = temp_path("trace.json");
  Trace::start(trace, "the test");
  const std::string yaml = split_yaml("trace", "", false, "  optimizer: {name: sgd, lr: 0.1}\n");
  auto gpu_order = [&](int64_t micro_batches, int64_t accumulate) {
    Model model = Model::load(yaml);
    model.use_devices(sim_gpus(1), policy());
    TrainingSpec spec = *model.graph().training;
    spec.micro_batches = micro_batches;
    spec.accumulate = accumulate;
    Trainer trainer(model, spec);
    trainer.step(batch_of(model, 36 * accumulate, 7));  // the first step runs in lockstep
    trainer.step(batch_of(model, 36 * accumulate, 8));
    REQUIRE(Trace::active()->flush());
    std::ifstream in(trace);
    std::stringstream text;
    text << in.rdbuf();
    const nlohmann::json json = nlohmann::json::parse(text.str());
    // fc2's slices on the GPU, in the order they ran: 'F' forward, 'B' backward
    std::vector<std::pair<double, char>> slices;
    for (const auto& e : json["traceEvents"]) {
      if (!e.contains("name") || !e.contains("ts")) continue;
      const std::string name = e["name"].get<std::string>();
      if (name.rfind("layer 'fc2' (linear) ", 0) != 0) continue;
      const bool forward = name.find("forward") != std::string::npos, backward = name.find("backward") != std::string::npos;
      if (forward || backward) slices.emplace_back(e["ts"].get<double>(), forward ? 'F' : 'B');
    }
    std::sort(slices.begin(), slices.end());
    std::string order;
    for (const auto& [ts, kind] : slices) order += kind;
    const size_t per_step = 2 * static_cast<size_t>(micro_batches * accumulate);
    return order.size() >= per_step ? order.substr(order.size() - per_step) : order;  // the second step's
  };
  const std::string accumulated = gpu_order(1, 3);
  const std::string pipelined = gpu_order(3, 1), four = gpu_order(4, 1);
  INFO("accumulated in 3 parts: " << accumulated << "; 3 pipelined micro-batches: " << pipelined << "; 4: " << four);
  CHECK(accumulated == "FBFBFB");
  CHECK(pipelined == "FFBFBB");
  CHECK(four == "FFBFBFBB");
  std::filesystem::remove(trace);
}

TEST_CASE("batch norm outside a data_parallel block refuses micro-batches, naming the layer", "[multidevice][train][pipeline]") {
  const std::string bn_layers = R"(name: bn_pipeline
inputs:
  x: {shape: [batch, 4, 3, 3]}
targets:
  y: {shape: [batch], dtype: int64}
layers:
  - {name: bn, op: batch_norm2d, num_features: 4}
  - {name: flat, op: flatten}
  - {name: head, op: linear, in_features: 36, out_features: 3}
loss: {op: cross_entropy, input: head, target: y}
)";
  // in the model file: refused at load, at pipeline's line
  const std::string in_file = write("bn_file.yaml", bn_layers + "train:\n  optimizer: {name: sgd, lr: 0.1}\n  pipeline: {micro_batches: 2}\n");
  try {
    Model::load(in_file);
    FAIL("a batch norm with micro-batches loaded");
  } catch (const ModelError& e) {
    const std::string message = e.what();
    INFO(message);
    CHECK(message.find(":13:") != std::string::npos);  // the pipeline: line
    CHECK(message.find("layer 'bn' (batch_norm2d") != std::string::npos);
    CHECK(message.find("data_parallel") != std::string::npos);
  }
  // asked for in code (as --micro-batches and Trainer(micro_batches=) do)
  const std::string plain = write("bn_plain.yaml", bn_layers + "train:\n  optimizer: {name: sgd, lr: 0.1}\n");
  Model model = Model::load(plain);
  TrainingSpec spec = *model.graph().training;
  spec.micro_batches = 3;
  CHECK_THROWS_WITH(Trainer(model, spec), Catch::Contains("layer 'bn' (batch_norm2d") && Catch::Contains("3 micro-batches"));
  spec.micro_batches = 1;
  CHECK_NOTHROW(Trainer(model, spec));

  // inside a data_parallel block the replicas already normalise over their chunks: allowed
  const std::string in_block = write("bn_block.yaml", R"(name: bn_block
inputs:
  x: {shape: [batch, 4, 3, 3]}
targets:
  y: {shape: [batch], dtype: int64}
layers:
  - name: block
    data_parallel: {devices: [cuda:0, cuda:1]}
    layers:
      - {name: bn, op: batch_norm2d, num_features: 4}
  - {name: flat, op: flatten}
  - {name: head, op: linear, in_features: 36, out_features: 3}
loss: {op: cross_entropy, input: head, target: y}
train:
  optimizer: {name: sgd, lr: 0.1}
  pipeline: {micro_batches: 2}
)");
  CHECK_NOTHROW(Model::load(in_block));
  // a bad count, at its line
  CHECK_THROWS_WITH(Model::load(write("bn_zero.yaml", bn_layers + "train:\n  optimizer: {name: sgd, lr: 0.1}\n  pipeline: {micro_batches: 0}\n")),
                    Catch::Contains(":13:") && Catch::Contains("micro_batches must be at least 1"));
}

TEST_CASE("micro-batches cut an embedding_bag's flat ids and offsets by bag, and train as whole batches",
          "[multidevice][train][pipeline]") {
  // the bench recommender: its tags are flat ids with offsets, a bag per sample; the tables
  // on the cpu, the rest on a simulated GPU (embeddings-on-cpu)
  const std::string yaml = std::string(TANDEM_SOURCE_DIR) + "/bench/configs/gpu_recommender_train.yaml";
  auto run = [&](int64_t micro_batches, int64_t accumulate) {
    Model model = Model::load(yaml);
    model.use_devices(sim_gpus(1), policy("embeddings-on-cpu"));
    TrainingSpec spec = *model.graph().training;
    spec.micro_batches = micro_batches;
    spec.accumulate = accumulate;
    Trainer trainer(model, spec);
    std::vector<double> losses;
    for (uint64_t s = 0; s < 3; ++s) {
      TensorMap batch = model.random_inputs({{"batch", 40}, {"tags", 300}}, 20 + s);
      batch.merge(model.random_targets({{"batch", 40}}, 20 + s));
      losses.push_back(trainer.step(batch));
    }
    return std::make_pair(losses, copy_of_parameters(model));
  };
  const auto [whole_losses, whole] = run(1, 1);
  for (auto [micro_batches, accumulate] : {std::pair<int64_t, int64_t>{3, 1}, {1, 3}, {2, 2}}) {
    INFO(micro_batches << " micro-batches, accumulate " << accumulate);
    const auto [losses, weights] = run(micro_batches, accumulate);
    for (size_t s = 0; s < losses.size(); ++s) CHECK(std::fabs(losses[s] - whole_losses[s]) <= 1e-6 * std::fabs(whole_losses[s]));
    CHECK(max_relative_error(weights, whole) <= 1e-6);
  }
}
