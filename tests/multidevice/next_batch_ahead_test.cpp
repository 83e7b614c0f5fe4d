// The next batch ahead (train: pipeline: {overlap_next_batch: true}, Note [the next batch
// ahead] in runtime/exec/training_executor.h): a split model (tables on the cpu, the MLP on
// a simulated GPU) whose steps start on the next batch's uploads and table lookups during
// their own backward ends at the serial run's weights to the bit, with ids that repeat from
// batch to batch (so the update changes rows the next batch looks up), for every optimizer
// that changes only the rows a table's gradient lists; the lookups really run during the
// GPU's backward; and the switch turns it off.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <cstring>
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
#include "table_split_support.h"
#include "runtime/model.h"
#include "runtime/trainer.h"

using namespace tandem;
using namespace tandem::testing;

namespace {

std::string split_yaml(const std::string& name, const std::string& sparse, const std::string& train) {
  return table_split_yaml(name, sparse, "cuda:0", train);
}

struct Trained {
  std::vector<double> losses;
  TensorMap weights;
  int64_t steps_looked_ahead = 0;
};

/// `steps` steps on the batches seeded 100, 101, ...: each given the next one when
/// `overlap`, else alone.
Trained train(const std::string& yaml, bool overlap, int steps) {
  Model model = Model::load(yaml);
  model.use_devices(sim_gpus(1), policy());
  Trainer trainer(model);
  std::vector<TensorMap> batches;
  for (int s = 0; s <= steps; ++s) batches.push_back(table_split_batch(model, 100 + static_cast<uint64_t>(s)));
  Trained out;
  for (int s = 0; s < steps; ++s)
    out.losses.push_back(overlap && s + 1 < steps ? trainer.step(batches[s], &batches[s + 1]) : trainer.step(batches[s]));
  out.weights = bit_copy(model.parameters());
  out.steps_looked_ahead = model.steps_looked_ahead();
  return out;
}

struct Variant {
  std::string name, sparse, train;
};

}  // namespace

TEST_CASE("looking the next batch up ahead trains a split model to the serial run's bits", "[multidevice][train][ahead]") {
  const std::string rest = "  optimizer: {name: adam, lr: 0.01}\n  optimizer_groups:\n    - {params: [items, tags, users, shops], ";
  const std::vector<Variant> variants = {
      {"sgd on every parameter, dense table gradients", "", "  optimizer: {name: sgd, lr: 0.5}\n"},
      {"sgd on sparse tables, the rest adam", ", sparse: true", rest + "name: sgd, lr: 0.5}\n"},
      {"rowwise_adagrad on sparse tables", ", sparse: true", rest + "name: rowwise_adagrad, lr: 0.3}\n"},
      {"sparse_adam on sparse tables", ", sparse: true", rest + "name: sparse_adam, lr: 0.05}\n"},
      {"adagrad on sparse tables", ", sparse: true", rest + "name: adagrad, lr: 0.3}\n"},
      {"rowwise_adagrad on dense-gradient tables", "", rest + "name: rowwise_adagrad, lr: 0.3}\n"},
      // adam moves every row of a table: its lookups wait for the update, the uploads go ahead
      {"adam everywhere", "", "  optimizer: {name: adam, lr: 0.01}\n"},
  };
  const int steps = 6;
  for (const Variant& v : variants) {
    INFO(v.name);
    const std::string yaml = split_yaml("bits", v.sparse, v.train);
    const Trained serial = train(yaml, false, steps);
    const Trained ahead = train(yaml, true, steps);
    CHECK(serial.steps_looked_ahead == 0);
    CHECK(ahead.steps_looked_ahead == steps - 1);
    for (int s = 0; s < steps; ++s) {
      INFO("step " << s);
      CHECK(ahead.losses[s] == serial.losses[s]);
    }
    check_same_bits(ahead.weights, serial.weights);
    // the run trained: the tables moved from where they started
    Model fresh = Model::load(yaml);
    CHECK(std::memcmp(fresh.parameters().at("items.weight").raw_data(), ahead.weights.at("items.weight").raw_data(),
                      ahead.weights.at("items.weight").nbytes()) != 0);
    std::filesystem::remove(yaml);
  }
}

TEST_CASE("the next batch's lookups run on the cpu while the GPU runs this step's backward, and look changed rows up again",
          "[multidevice][train][ahead]") {
  const std::string trace = write_temp_file("trace.json", "");
  Trace::start(trace, "the test");
  const std::string yaml = split_yaml("trace", ", sparse: true",
                                      "  optimizer: {name: adam, lr: 0.01}\n  optimizer_groups:\n    - {params: [items, "
                                      "tags, users, shops], name: rowwise_adagrad, lr: 0.3}\n");
  const int steps = 4;
  train(yaml, true, steps);
  REQUIRE(Trace::active()->flush());
  std::ifstream in(trace);
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json json = nlohmann::json::parse(text.str());
  // (start, end) of the items table's lookups ahead, of its lookups again after each update,
  // and of fc1's backward on the GPU: the last backward of the GPU in each step
  std::vector<std::pair<double, double>> ahead, again, gpu_backward;
  for (const auto& e : json["traceEvents"]) {
    if (!e.contains("name") || !e.contains("ts") || !e.contains("dur")) continue;
    const std::string name = e["name"].get<std::string>();
    const double ts = e["ts"].get<double>(), end = ts + e["dur"].get<double>();
    if (name.rfind("layer 'items' (embedding_bag) forward ahead", 0) == 0) ahead.emplace_back(ts, end);
    if (name.rfind("layer 'items' (embedding_bag) looked up again", 0) == 0) again.emplace_back(ts, end);
    if (name.rfind("layer 'fc1' (linear) backward", 0) == 0) gpu_backward.emplace_back(ts, end);
  }
  std::sort(ahead.begin(), ahead.end());
  std::sort(again.begin(), again.end());
  std::sort(gpu_backward.begin(), gpu_backward.end());
  INFO("lookups ahead " << ahead.size() << ", again " << again.size() << ", fc1 backwards " << gpu_backward.size());
  REQUIRE(ahead.size() == steps - 1);  // during steps 0 to 2, for steps 1 to 3
  REQUIRE(again.size() == steps - 1);  // after each of those steps' updates
  REQUIRE(gpu_backward.size() == steps);
  // Step 0 runs each executor's first step in lockstep; from step 1 on the lookups of step
  // k + 1 start before the GPU has finished step k's backward, and are looked up again only
  // after it (after the update).
  for (int k = 1; k + 1 < steps; ++k) {
    INFO("step " << k);
    CHECK(ahead[k].first < gpu_backward[k].second);
    CHECK(again[k].first > gpu_backward[k].second);
  }
  std::filesystem::remove(trace);
  std::filesystem::remove(yaml);
}

TEST_CASE("overlap_next_batch: false (or --no-overlap-next-batch) runs each step after the update before it",
          "[multidevice][train][ahead]") {
  const std::string yaml = split_yaml("off", "", "  optimizer: {name: sgd, lr: 0.5}\n  pipeline: {overlap_next_batch: false}\n");
  Model model = Model::load(yaml);
  REQUIRE(model.graph().training);
  CHECK_FALSE(model.graph().training->overlap_next_batch);
  const Trained off = train(yaml, true, 3);
  CHECK(off.steps_looked_ahead == 0);
  // a value that is not a boolean is refused where it stands
  const std::string bad = split_yaml("bad", "", "  optimizer: {name: sgd, lr: 0.5}\n  pipeline: {overlap_next_batch: 3}\n");
  try {
    Model::load(bad);
    FAIL("a pipeline overlap_next_batch of 3 was accepted");
  } catch (const UserError& e) {
    CHECK_THAT(e.what(), Catch::Contains("bad.yaml:") && Catch::Contains("overlap_next_batch"));
  }
  int code = 0;
  std::string out = run_program(std::string(TANDEM_CLI) + " train " + yaml +
                                    " --sim-gpus 1 --overlap-next-batch --bench-steps 3 --bind tags=50 --batch 16",
                                &code);
  CHECK(code == 0);
  CHECK_THAT(out, Catch::Contains("training step"));
  std::filesystem::remove(yaml);
  std::filesystem::remove(bad);
}

TEST_CASE("a lookup that a view on the cpu reads after its upload is kept for the forward that takes the work ahead up",
          "[multidevice][train][ahead]") {
  // `items` goes up to the GPU for `features`, and then a view on the cpu (`col`) reads it
  // too: the view runs ahead and is its last reader, but the upload runs in forward
  // (DLRM's interaction reads each table's output twice so: bench/configs/dlrm_split_train.yaml)
  const std::string yaml = write_temp_file("view.yaml", std::string("name: view_ahead\n") + kTableInputs + R"(layers:
  - {name: items, op: embedding_bag, inputs: item_ids, num_embeddings: 40, embedding_dim: 8, mode: sum, device: cpu, sparse: true}
  - {name: bottom, op: linear, inputs: dense, in_features: 6, out_features: 8, device: "cuda:0"}
  - {name: features, op: cat, inputs: [bottom, items], dim: 1, device: "cuda:0"}
  - {name: col, op: reshape, inputs: items, shape: [batch, 8, 1], device: cpu}
  - {name: flat, op: flatten, inputs: col, device: "cuda:0"}
  - {name: both, op: cat, inputs: [features, flat], dim: 1, device: "cuda:0"}
  - {name: fc, op: linear, in_features: 24, out_features: 3, device: "cuda:0"}
loss: {op: cross_entropy, input: fc, target: label}
train:
  optimizer: {name: adam, lr: 0.01}
  optimizer_groups:
    - {params: [items], name: rowwise_adagrad, lr: 0.3}
)");
  const int steps = 4;
  const Trained serial = train(yaml, false, steps);
  const Trained ahead = train(yaml, true, steps);
  CHECK(ahead.steps_looked_ahead == steps - 1);
  check_same_bits(ahead.weights, serial.weights);
  std::filesystem::remove(yaml);
}
