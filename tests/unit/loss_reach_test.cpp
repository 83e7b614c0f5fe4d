// A loss that no parameter reaches has nothing to train: tandem train refuses it with exit
// code 2, naming the parameters that get no gradient (or saying there are none), on the
// cpu and placed alike, as do the Trainer and Model::loss_and_backward. A parameter that
// some other output uses but the loss does not reach is left as it was, as torch's
// optimizers skip a parameter without a .grad.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "graph/load_graph.h"
#include "graph/loss_reach.h"
#include "runtime/trainer.h"
#include "unit_test_support.h"

using namespace tandem;
using tandem::testing::run_cli;

namespace {

std::string write_model(const std::string& name, const std::string& yaml) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("tandem-reach-" + std::to_string(getpid()) + "-" + name + ".yaml")).string();
  std::ofstream(path) << yaml;
  return path;
}

const char* header = R"(inputs:
  x: {shape: [batch, 4]}
targets:
  label: {shape: [batch], dtype: int64}
)";

// No layer has parameters.
const std::string no_parameters = std::string("name: no_parameters\n") + header + R"(layers:
  - {name: act, op: tanh}
loss: {op: cross_entropy, input: act, target: label}
)";

// fc has parameters, but the loss scores tanh(x), which is not computed from them.
const std::string loss_reads_around_them = std::string("name: around\n") + header + R"(layers:
  - {name: fc, op: linear, in_features: 4, out_features: 4}
  - {name: act, op: tanh, inputs: x}
outputs: [fc, act]
loss: {op: cross_entropy, input: act, target: label}
)";

// The loss scores a graph input.
const std::string loss_reads_an_input = std::string("name: input_scored\n") + R"(inputs:
  x: {shape: [batch, 4]}
  scores: {shape: [batch, 3]}
targets:
  label: {shape: [batch], dtype: int64}
layers:
  - {name: fc, op: linear, in_features: 4, out_features: 3, inputs: x}
loss: {op: cross_entropy, input: scores, target: label}
)";

}  // namespace

TEST_CASE("training a loss that no parameter reaches exits 2 and names the parameters", "[train][errors][cli]") {
  struct Case {
    const char* name;
    const std::string* yaml;
    std::vector<std::string> expected;
  };
  const Case cases[] = {
      {"no_parameters", &no_parameters, {"has nothing to train", "cross_entropy of 'act'", "the model has none"}},
      {"around", &loss_reads_around_them,
       {"has nothing to train", "fc.weight, fc.bias would get no gradient", "'act', which is not computed from them"}},
      {"input", &loss_reads_an_input, {"fc.weight, fc.bias would get no gradient", "graph input 'scores'"}},
  };
  for (const Case& c : cases) {
    const std::string path = write_model(c.name, *c.yaml);
    for (const std::string devices : {"", " --sim-gpus 2", " --sim-gpus 2 --placement balanced"}) {
      for (const std::string how : {" --bench-steps 1", " --epochs 1 --data /dev/null"}) {
        INFO(c.name << devices << how);
        int code = 0;
        const std::string out = run_cli("train " + path + devices + how, &code, "env -u TANDEM_SIM_GPUS ");
        INFO(out);
        CHECK(code == 2);
        for (const std::string& part : c.expected) CHECK_THAT(out, Catch::Contains(part));
        CHECK_THAT(out, !Catch::Contains("internal error"));
      }
    }
    // inference and evaluation need no gradient: the model still runs
    int code = 0;
    run_cli("run " + path + " --batch 2", &code, "env -u TANDEM_SIM_GPUS ");
    CHECK(code == 0);
    std::filesystem::remove(path);
  }
}

TEST_CASE("the Trainer and Model::loss_and_backward refuse a loss no parameter reaches", "[train][errors]") {
  for (const std::string* yaml : {&no_parameters, &loss_reads_around_them, &loss_reads_an_input}) {
    Graph graph = load_graph_from_string(*yaml, "reach.yaml");
    INFO(graph.name);
    CHECK(parameters_the_loss_reaches(graph).empty());
    Model model(graph);
    CHECK_THROWS_AS(Trainer(model, TrainingSpec{}), UserError);
    Bindings b{{"batch", 2}};
    TensorMap batch = model.random_inputs(b, 1);
    batch.merge(model.random_targets(b, 1));
    CHECK_THROWS_WITH(model.loss_and_backward(batch, 0), Catch::Contains("has nothing to train"));
  }
}

TEST_CASE("what the loss reaches follows the float tensors back from its input", "[train]") {
  const Graph graph = load_graph_from_string(std::string("name: reach\n") + R"(inputs:
  x: {shape: [batch, 4]}
  ids: {shape: [batch], dtype: int64, high: 5}
targets:
  label: {shape: [batch], dtype: int64}
layers:
  - {name: emb, op: embedding, num_embeddings: 5, embedding_dim: 4, inputs: ids}
  - {name: fc, op: linear, in_features: 4, out_features: 4, inputs: x}
  - {name: both, op: add, inputs: [fc, emb]}
  - {name: image, op: reshape, shape: [batch, 1, 2, 2], inputs: x}
  - {name: norm, op: batch_norm2d, num_features: 1}
  - {name: head, op: linear, in_features: 4, out_features: 3, inputs: both}
  - {name: unused, op: linear, in_features: 4, out_features: 2, inputs: x}
outputs: [head, unused, norm]
loss: {op: cross_entropy, input: head, target: label}
)",
                                             "reach.yaml");
  // not norm's (another output), nor its running statistics (buffers), nor unused's
  CHECK(parameters_the_loss_reaches(graph) ==
        std::vector<std::string>{"emb.weight", "fc.weight", "fc.bias", "head.weight", "head.bias"});
  CHECK_NOTHROW(check_loss_reaches_parameters(graph));
}

TEST_CASE("a parameter the loss does not reach is not updated, weight decay included, as in torch", "[train]") {
  // torch leaves such a parameter's .grad None, and SGD, Adam and AdamW skip it: its
  // weight decay does not shrink it either.
  const std::string path = write_model("partial", std::string("name: partial\n") + header + R"(layers:
  - {name: fc, op: linear, in_features: 4, out_features: 3}
  - {name: side, op: linear, in_features: 4, out_features: 2, inputs: x}
outputs: [fc, side]
loss: {op: cross_entropy, input: fc, target: label}
)");
  Model model = Model::load(path);
  CHECK(parameters_the_loss_reaches(model.graph()) == std::vector<std::string>{"fc.weight", "fc.bias"});
  for (const char* optimizer : {"sgd", "adam", "adamw"}) {
    INFO(optimizer);
    model.init_parameters(7);
    const TensorMap before = [&] {
      TensorMap copy;
      for (const auto& [name, p] : model.parameters()) copy.emplace(name, p.clone());
      return copy;
    }();
    TrainingSpec spec;
    spec.optimizer.name = optimizer;
    spec.optimizer.lr = 0.1;
    spec.optimizer.momentum = std::string(optimizer) == "sgd" ? 0.9 : 0;
    spec.optimizer.weight_decay = 0.5;
    Trainer trainer(model, spec);
    Bindings b{{"batch", 4}};
    TensorMap batch = model.random_inputs(b, 3);
    batch.merge(model.random_targets(b, 3));
    for (int step = 0; step < 3; ++step) trainer.step(batch);
    CHECK(model.parameters().at("side.weight").to_vector<float>() == before.at("side.weight").to_vector<float>());
    CHECK(model.parameters().at("side.bias").to_vector<float>() == before.at("side.bias").to_vector<float>());
    CHECK(model.parameters().at("fc.weight").to_vector<float>() != before.at("fc.weight").to_vector<float>());
  }
  std::filesystem::remove(path);
}
