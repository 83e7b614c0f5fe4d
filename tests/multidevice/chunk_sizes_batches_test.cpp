// Fixed chunk_sizes are checked against every batch a training run will feed before its
// first step (issue 30, item 3): the training batches, an epoch's short last batch unless
// drop_last, and validation's batches, whose last one was where a run used to stop after a
// whole epoch. A fixed-size input is checked when the model loads.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "graph/load_graph.h"
#include "multidevice_support.h"
#include "runtime/data_parallel_batches.h"

using namespace tandem;
using namespace tandem::testing;

namespace {

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("tandem_chunks_" + std::to_string(getpid()) + "_" + name)).string();
}

}  // namespace

TEST_CASE("planned_batches lists the full, the last and the micro-batches a run feeds", "[multidevice][data_parallel]") {
  auto sizes = [](const std::vector<PlannedBatch>& b) {
    std::vector<int64_t> s;
    for (const PlannedBatch& p : b) s.push_back(p.size);
    return s;
  };
  CHECK(sizes(planned_batches(80, 32, 1, false, "validation")) == std::vector<int64_t>{32, 16});
  CHECK(sizes(planned_batches(64, 32, 1, false, "validation")) == std::vector<int64_t>{32});
  CHECK(sizes(planned_batches(70, 32, 1, true, "training")) == std::vector<int64_t>{32});
  CHECK(sizes(planned_batches(10, 32, 1, false, "training")) == std::vector<int64_t>{10});
  // accumulate 2 over batches of 16: a step of 32 in two halves; the last 8 in two fours
  CHECK(sizes(planned_batches(72, 16, 2, false, "training")) == std::vector<int64_t>{16, 4});
  CHECK(planned_batches(80, 32, 1, false, "validation")[1].what ==
        "the last validation batch (80 validation samples in batches of 32)");
}

TEST_CASE("chunk_sizes that a validation or last batch does not fit are refused before the first step",
          "[multidevice][data_parallel]") {
  const std::string yaml = temp_path("model.yaml"), csv = temp_path("data.csv");
  std::ofstream(yaml) << R"(name: chunks
inputs:
  x: {shape: [batch, 4]}
targets:
  y: {shape: [batch], dtype: int64}
layers:
  - name: body
    data_parallel: {devices: [cuda:0, cuda:1], chunk_sizes: [20, 12]}
    layers:
      - {name: fc, op: linear, in_features: 4, out_features: 3}
loss: {op: cross_entropy, input: body.fc, target: y}
train:
  batch: 32
  epochs: 1
  optimizer: {name: sgd, lr: 0.1}
)";
  {
    std::mt19937 rng(static_cast<unsigned>(Catch::rngSeed()));
    std::normal_distribution<float> normal;
    std::ofstream out(csv);
    for (int i = 0; i < 400; ++i)
      out << normal(rng) << ',' << normal(rng) << ',' << normal(rng) << ',' << normal(rng) << ',' << (rng() % 3) << '\n';
  }
  const std::string train = std::string(TANDEM_CLI) + " train " + yaml + " --data " + csv + " --sim-gpus 2";
  int code = 0;
  // 80 for validation: 32, 32 and 16
  std::string out = run_program(train + " --validation-split 0.2", &code);
  INFO(out);
  CHECK(code == 2);
  CHECK(out.find("data_parallel block 'body': chunk_sizes add up to 32, but the run feeds batches of 16 samples too: "
                 "the last validation batch (80 validation samples in batches of 32)") != std::string::npos);
  CHECK(out.find("epoch ") == std::string::npos);  // before the first step, not after an epoch
  // 336 to train: its last batch of 16, unless dropped
  out = run_program(train + " --validation-split 0.16", &code);
  CHECK(code == 2);
  CHECK(out.find("the last training batch (336 training samples in batches of 32)") != std::string::npos);
  out = run_program(train + " --validation-split 0.16 --drop-last", &code);
  CHECK(code == 0);
  CHECK(out.find("done: 10 steps") != std::string::npos);

  // a fixed extent: checked when the model loads
  const std::string fixed = temp_path("fixed.yaml");
  std::ofstream(fixed) << R"(name: fixed
inputs:
  x: {shape: [10, 4]}
layers:
  - name: body
    data_parallel: {devices: [cuda:0, cuda:1], chunk_sizes: [6, 3]}
    layers:
      - {name: fc, op: linear, in_features: 4, out_features: 3}
)";
  CHECK_THROWS_WITH(Model::load(fixed), Catch::Contains(":5:5: data_parallel block 'body': chunk_sizes add up to 9, but "
                                                        "the block scatters dim 0 of 'x' [10, 4], of 10"));
  std::filesystem::remove(yaml);
  std::filesystem::remove(csv);
  std::filesystem::remove(fixed);
}
