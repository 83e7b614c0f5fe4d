// Tables updated in their backward (train: update_tables_in_backward, Note [a table updated
// in its backward] in runtime/exec/table_updates.h): `sparse: true` tables whose optimizer
// takes their row gradient are updated in the task of the backward that completes it, and
// the weights are those of the update after backward to the bit, for every such optimizer,
// beside dense parameters in the same group or another, on the cpu alone and split over the
// cpu and a simulated GPU (with the next batch looked up ahead, and in micro-batches). Where
// the step needs every gradient first (clipping, accumulation), nothing is updated early;
// and a step whose loss is not finite leaves the tables as they were.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "core/error.h"
#include "multidevice_support.h"
#include "table_split_support.h"
#include "runtime/model.h"
#include "runtime/trainer.h"

using namespace tandem;
using namespace tandem::testing;

namespace {

std::string yaml_of(const std::string& name, const std::string& mlp_device, const std::string& train) {
  return table_split_yaml(name, ", sparse: true", mlp_device, train);
}

struct Trained {
  TensorMap weights;
  int64_t updated_in_backward = 0;
};

/// `steps` steps on the batches seeded 200, 201, ..., placed over a simulated GPU when
/// `placed` (each step given the next batch, which it looks up ahead where it may).
Trained train_model(const std::string& yaml, bool placed, int steps) {
  Model model = Model::load(yaml);
  if (placed) model.use_devices(sim_gpus(1), policy());
  Trainer trainer(model);
  std::vector<TensorMap> batches;
  for (int s = 0; s <= steps; ++s) batches.push_back(table_split_batch(model, 200 + static_cast<uint64_t>(s)));
  for (int s = 0; s < steps; ++s) trainer.step(batches[s], &batches[s + 1]);
  return {bit_copy(model.parameters()), trainer.tables_updated_in_backward()};
}

struct Setup {
  std::string name, mlp_device, pipeline;
  bool placed;
};

const std::vector<Setup> setups = {
    {"the cpu alone", "cpu", "", false},
    {"the cpu alone in 2 micro-batches", "cpu", "  pipeline: {micro_batches: 2}\n", false},
    {"tables on the cpu, the MLP on a simulated GPU, the next batch ahead", "cuda:0", "", true},
    {"split, in 3 micro-batches", "cuda:0", "  pipeline: {micro_batches: 3}\n", true},
};

}  // namespace

TEST_CASE("tables updated in their backward train to the bits of the update after backward",
          "[multidevice][train][table_updates]") {
  const std::string groups = "  optimizer: {name: adam, lr: 0.01}\n  optimizer_groups:\n    - {params: [items, tags, users, shops], ";
  const std::vector<std::pair<std::string, std::string>> optimizers = {
      // one group: the tables in backward, the dense parameters in the step
      {"sgd on every parameter", "  optimizer: {name: sgd, lr: 0.5}\n"},
      {"sgd on the tables, adam on the rest", groups + "name: sgd, lr: 0.5}\n"},
      {"rowwise_adagrad", groups + "name: rowwise_adagrad, lr: 0.3, lr_decay: 0.1}\n"},
      {"adagrad", groups + "name: adagrad, lr: 0.3, initial_accumulator_value: 0.1}\n"},
      {"sparse_adam", groups + "name: sparse_adam, lr: 0.05}\n"},
  };
  const int steps = 5;
  for (const Setup& setup : setups) {
    for (const auto& [name, train] : optimizers) {
      INFO(setup.name << ", " << name);
      const std::string after =
          yaml_of("after", setup.mlp_device, train + setup.pipeline + "  update_tables_in_backward: false\n");
      const std::string in = yaml_of("in", setup.mlp_device, train + setup.pipeline);
      const Trained serial = train_model(after, setup.placed, steps);
      const Trained fused = train_model(in, setup.placed, steps);
      CHECK(serial.updated_in_backward == 0);
      CHECK(fused.updated_in_backward == 4 * steps);  // every table, every step
      check_same_bits(fused.weights, serial.weights);
      // the tables trained: they moved from where they started
      Model fresh = Model::load(in);
      for (const char* table : {"items.weight", "tags.weight", "users.weight", "shops.weight"}) {
        INFO(table);
        CHECK(std::memcmp(fresh.parameters().at(table).raw_data(), fused.weights.at(table).raw_data(),
                          fused.weights.at(table).nbytes()) != 0);
      }
      std::filesystem::remove(after);
      std::filesystem::remove(in);
    }
  }
}

TEST_CASE("a step that needs every gradient before its update updates no table in backward",
          "[multidevice][train][table_updates]") {
  const std::string groups =
      "  optimizer: {name: adam, lr: 0.01}\n  optimizer_groups:\n    - {params: [items, tags, users, shops], name: "
      "rowwise_adagrad, lr: 0.3}\n";
  for (const std::string extra : {"  clip_grad_norm: 0.5\n", "  accumulate: 2\n"}) {
    INFO(extra);
    const std::string yaml = yaml_of("needs_all", "cpu", groups + extra);
    const Trained trained = train_model(yaml, false, 2);
    CHECK(trained.updated_in_backward == 0);
    std::filesystem::remove(yaml);
  }
  // a value that is not a boolean is refused where it stands
  const std::string bad = yaml_of("bad", "cpu", groups + "  update_tables_in_backward: often\n");
  try {
    Model::load(bad);
    FAIL("update_tables_in_backward: often was accepted");
  } catch (const UserError& e) {
    CHECK_THAT(e.what(), Catch::Contains("bad.yaml:") && Catch::Contains("update_tables_in_backward"));
  }
  std::filesystem::remove(bad);
}

TEST_CASE("a step whose loss is not finite leaves the tables it would have updated in backward as they were",
          "[multidevice][train][table_updates]") {
  const std::string groups =
      "  optimizer: {name: adam, lr: 0.01}\n  optimizer_groups:\n    - {params: [items, tags, users, shops], name: "
      "sparse_adam, lr: 0.05}\n";
  for (const Setup& setup : {setups[0], setups[2]}) {
    INFO(setup.name);
    const std::string yaml = yaml_of("nan", setup.mlp_device, groups);
    Model model = Model::load(yaml);
    if (setup.placed) model.use_devices(sim_gpus(1), policy());
    Trainer trainer(model);
    trainer.step(table_split_batch(model, 300));  // the state exists: a later update would move the tables
    TensorMap batch = table_split_batch(model, 301);
    batch.at("dense").data<float>()[5] = std::numeric_limits<float>::quiet_NaN();  // a NaN loss, NaN gradients
    const TensorMap before = bit_copy(model.parameters());
    CHECK_THROWS_WITH(trainer.step(batch), Catch::Contains("the training loss is NaN"));
    check_same_bits(bit_copy(model.parameters()), before);
    CHECK(trainer.tables_updated_in_backward() == 4);  // the first step's
    std::filesystem::remove(yaml);
  }
}
