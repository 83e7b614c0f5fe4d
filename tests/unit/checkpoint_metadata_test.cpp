// A checkpoint's metadata is checked field by field before anything is restored: a damaged
// or hand-edited field is refused naming the file, the field and its value (a negative step
// used to end in an assertion, "1x" read as 1); errors in its optimizer state name the file.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>
#include <map>
#include <string>

#include "graph/load_graph.h"
#include "runtime/checkpoint_metadata.h"
#include "runtime/io/safetensors.h"
#include "runtime/trainer.h"
#include "unit_test_support.h"

using namespace tandem;

namespace {

constexpr const char* kModel = R"(name: tiny
inputs:
  x: {shape: [batch, 3]}
targets:
  y: {shape: [batch], dtype: int64}
layers:
  - {name: fc, op: linear, in_features: 3, out_features: 2}
loss: {op: cross_entropy, input: fc, target: y}
train: {batch: 4, seed: 7, optimizer: {name: adam, lr: 0.01}}
)";

std::string scratch(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("tandem-ckpt-" + std::to_string(getpid()) + "-" + name)).string();
}

struct Fixture {
  Graph graph = load_graph_from_string(kModel, "tiny.yaml");
  Model model{graph};
  Trainer trainer{model, *graph.training};
  std::string path = scratch("good.safetensors");

  /// A checkpoint after two steps.
  Fixture() {
    model.init_parameters(7);
    TensorMap batch{{"x", Tensor::from_vector<float>({4, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 1, 2, 3})},
                    {"y", Tensor::from_vector<int64_t>({4}, {0, 1, 1, 0})}};
    trainer.step(batch);
    trainer.step(batch);
    trainer.save_checkpoint(path);
  }
  ~Fixture() { std::filesystem::remove(path); }

  /// The good checkpoint with `edit` applied to its metadata, written to a new file.
  std::string edited(const std::map<std::string, std::string>& edit, const std::vector<std::string>& drop = {}) {
    auto meta = read_safetensors_metadata(path);
    for (const auto& [k, v] : edit) meta[k] = v;
    for (const auto& k : drop) meta.erase(k);
    std::string out = scratch("edited.safetensors");
    write_safetensors(out, read_safetensors(path), meta);
    return out;
  }
};

std::string load_error(Trainer& trainer, const std::string& path) {
  try {
    trainer.load_checkpoint(path);
  } catch (const UserError& e) {
    return e.what();
  }
  return "(loaded)";
}

}  // namespace

TEST_CASE("checkpoint metadata: every field is refused when damaged, naming it", "[train][checkpoint]") {
  Fixture f;
  Model fresh(f.graph);
  fresh.init_parameters(1);
  Trainer resumed(fresh, *f.graph.training);
  REQUIRE(load_error(resumed, f.path) == "(loaded)");
  CHECK(resumed.steps_done() == 2);

  const std::string tail = "; the file is damaged or was not written by tandem train --save";
  struct Case {
    std::map<std::string, std::string> edit;
    std::string message;
  } cases[] = {
      {{{"step", "-1"}}, "field 'step' = '-1' is not a whole number (digits only)"},
      {{{"step", "1x"}}, "field 'step' = '1x' is not a whole number (digits only)"},
      {{{"step", " 2"}}, "field 'step' = ' 2' is not a whole number (digits only)"},
      {{{"step", ""}}, "field 'step' = '' is not a whole number (digits only)"},
      {{{"total_steps", "-10"}}, "field 'total_steps' = '-10' is not a whole number (digits only)"},
      {{{"epoch", "99999999999999999999999"}},
       "field 'epoch' = '99999999999999999999999' is too large; expected a whole number from 0 to 9007199254740992"},
      {{{"step", "9007199254740993"}}, "field 'step' = '9007199254740993' is out of range"},
      {{{"seed", "18446744073709551616"}}, "field 'seed' = '18446744073709551616' is too large"},
      {{{"batch", "0"}}, "field 'batch' = '0' is out of range; expected a whole number from 1"},
      {{{"epochs", "two"}}, "field 'epochs' = 'two' is not a whole number (digits only)"},
      {{{"lr", "nan"}}, "field 'lr' = 'nan' is not a finite number >= 0"},
      {{{"lr", "-0.1"}}, "field 'lr' = '-0.1' is not a finite number >= 0"},
      {{{"optimizer", "rmsprop"}}, "field 'optimizer' = 'rmsprop' is not an optimizer; expected sgd, adam, adamw, adagrad, rowwise_adagrad or sparse_adam"},
      {{{"tandem_checkpoint", "2"}}, "field 'tandem_checkpoint' = '2' is not a version this Tandem reads"},
      {{{"epoch", "3"}}, "says 3 epochs done in 2 steps, but every epoch takes at least one step"},
  };
  for (const Case& c : cases) {
    const std::string file = f.edited(c.edit);
    INFO(c.edit.begin()->first << " = " << c.edit.begin()->second);
    std::string message = load_error(resumed, file);
    CHECK_THAT(message, Catch::StartsWith(file + ": the checkpoint's metadata " + c.message));
    CHECK_THAT(message, Catch::EndsWith(tail));
    CHECK(resumed.steps_done() == 2);  // nothing restored
  }
  for (const char* field : {"epoch", "step", "total_steps", "seed", "optimizer", "lr", "batch", "epochs", "model"}) {
    INFO(field);
    const std::string file = f.edited({}, {field});
    CHECK_THAT(load_error(resumed, file),
               Catch::StartsWith(file + ": the checkpoint's metadata has no '" + std::string(field) + "'"));
  }
  std::filesystem::remove(scratch("edited.safetensors"));
}

TEST_CASE("checkpoint metadata: a run resumed with another optimizer, and bad optimizer state, are refused naming the file",
          "[train][checkpoint]") {
  Fixture f;
  Model fresh(f.graph);
  fresh.init_parameters(1);
  TrainingSpec sgd = *f.graph.training;
  sgd.optimizer = OptimizerConfig{};
  Trainer other(fresh, sgd);
  CHECK(load_error(other, f.path) == f.path + ": the checkpoint was trained with seed 7, batch 4 and optimizer adam; "
                                              "resume with the same settings to continue the same run");

  TensorMap tensors = read_safetensors(f.path);
  tensors.at("optimizer.step") = Tensor::from_vector<int64_t>({1}, {-3});
  const std::string bad = scratch("bad_state.safetensors");
  write_safetensors(bad, tensors, read_safetensors_metadata(f.path));
  Trainer resumed(fresh, *f.graph.training);
  CHECK(load_error(resumed, bad) == bad + ": adam optimizer state: 'step' is -3, expected >= 1");
  std::filesystem::remove(bad);
}

TEST_CASE("checkpoint metadata: the learning rate is written so that it reads back exactly", "[train][checkpoint]") {
  CheckpointMetadata m;
  m.model = "m";
  m.optimizer = "sgd";
  m.lr = 1e-7;
  m.step = 3;
  auto map = checkpoint_metadata_map(m);
  CHECK(map.at("lr") == "1e-07");
  CheckpointMetadata back = parse_checkpoint_metadata(map, "x");
  CHECK(back.lr == 1e-7);
  CHECK(back.step == 3);
}
