// `devices: all` (issue 30, item 6): a data_parallel block over every GPU the machine or
// --sim-gpus gives, as nn.DataParallel(model) takes every visible GPU, its output on the
// first; and the tutorial prints the GPUs it really uses.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>

#include "graph/load_graph.h"
#include "multidevice_support.h"

using namespace tandem;
using namespace tandem::testing;

namespace {

std::string write_yaml(const std::string& tag, const std::string& text) {
  std::string path = (std::filesystem::temp_directory_path() /
                      ("tandem_dp_all_" + tag + "_" + std::to_string(getpid()) + ".yaml")).string();
  std::ofstream(path) << text;
  return path;
}

const char* kAll = R"(name: dp_all
inputs:
  input: {shape: [batch, 5]}
layers:
  - name: model
    data_parallel: {devices: all}
    layers:
      - {name: fc, op: linear, in_features: 5, out_features: 2}
outputs: [model.fc]
)";

}  // namespace

TEST_CASE("devices: all replicates over every GPU there is, gathered on the first", "[multidevice][data_parallel]") {
  const int gpus = GENERATE(1, 3, 4);
  INFO(gpus << " simulated GPUs");
  const std::string yaml = write_yaml("model", kAll);
  Model model = Model::load(yaml), reference = Model::load(yaml);
  reference.to(Device::cpu());
  model.init_parameters(8);
  reference.init_parameters(8);
  model.use_devices(sim_gpus(gpus), policy());
  std::vector<std::string> replicas;
  model.set_forward_hook([&](const LayerCall& call) {
    if (call.node->replica && call.node->replica->kind == ReplicaRole::Kind::replica) replicas.push_back(call.device.str());
  });
  TensorMap in = reference.random_inputs({{"batch", 12}}, 5);
  CHECK(max_relative_error(model.forward(in), reference.forward(in)) <= 1e-6);
  std::sort(replicas.begin(), replicas.end());
  std::vector<std::string> expected;
  for (int i = 0; i < gpus; ++i) expected.push_back("cuda:" + std::to_string(i));
  CHECK(replicas == expected);
  const Graph& executed = executed_graph(model.last_plan(), model.graph());
  for (const OpStep& s : model.last_plan().steps)
    if (executed.nodes[s.node].op == "cat") CHECK(s.device == Device::cuda(0));  // the gather, on the first GPU
  std::filesystem::remove(yaml);
}

TEST_CASE("devices: all without a GPU, or with chunk_sizes, is refused naming the block", "[multidevice][data_parallel]") {
  const std::string yaml = write_yaml("none", kAll);
  Model model = Model::load(yaml);
  model.use_devices(sim_gpus(0), policy());
  CHECK_THROWS_WITH(model.forward(model.random_inputs({{"batch", 2}}, 1)),
                    Catch::Contains("data_parallel block 'model' has devices: all, but this machine has no GPU") &&
                        Catch::Contains("--sim-gpus N") && Catch::Contains("--place '*=cpu'"));
  int code = 0;
  std::string out = run_program(std::string(TANDEM_CLI) + " run " + yaml + " --batch 2", &code);
  CHECK(code == 2);
  CHECK(out.find("has devices: all, but this machine has no GPU") != std::string::npos);
  out = run_program(std::string(TANDEM_CLI) + " check " + yaml, &code);
  CHECK(code == 0);
  CHECK(out.find("dp[all]") != std::string::npos);
  std::string sized = kAll;
  sized.replace(sized.find("{devices: all}"), 14, "{devices: all, chunk_sizes: [1, 2]}");
  CHECK_THROWS_WITH(Model::load(write_yaml("sized", sized)),
                    Catch::Contains("chunk_sizes gives one size per device, but devices: all"));
  std::filesystem::remove(yaml);
}

TEST_CASE("the tutorial prints the GPUs the model really uses", "[multidevice][data_parallel]") {
  int code = 0;
  // dp_tutorial.yaml lists two: with eight, it says it uses two of them
  std::string out = run_program(std::string(TANDEM_DP_TUTORIAL) + " " + TANDEM_SOURCE_DIR +
                                    "/configs/dp_tutorial.yaml --sim-gpus 8", &code);
  CHECK(code == 0);
  CHECK(out.rfind("Let's use 2 GPUs! (simulated, 2 of the 8 as the model file lists them)\n", 0) == 0);
  // devices: all takes the four: batches of 30 in chunks of 8, 8, 8 and 6
  const std::string all = write_yaml("tutorial", kAll);
  out = run_program(std::string(TANDEM_DP_TUTORIAL) + " " + all + " --sim-gpus 4", &code);
  CHECK(code == 0);
  CHECK(out.rfind("Let's use 4 GPUs! (simulated)\n", 0) == 0);
  CHECK(out.find("\tIn Model: input size [6, 5] output size [6, 2]") != std::string::npos);
  std::filesystem::remove(all);
}
