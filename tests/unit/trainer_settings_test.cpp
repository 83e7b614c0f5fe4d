// Trainer(model) takes the model's train: section; a model with loss: and no train: is
// refused with a message that says how to give the settings (issue 30, item 9: it was
// `unknown optimizer ''`, from the README's `*model.graph().training` on an empty optional).
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "runtime/trainer.h"

using namespace tandem;

namespace {

std::string write_model(const std::string& tag, const std::string& train) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("tandem-trainer-" + tag + "-" + std::to_string(getpid()) + ".yaml")).string();
  std::ofstream(path) << R"(name: small
inputs:
  x: {shape: [batch, 4]}
targets:
  y: {shape: [batch], dtype: int64}
layers:
  - {name: fc, op: linear, in_features: 4, out_features: 3}
loss: {op: cross_entropy, input: fc, target: y}
)" << train;
  return path;
}

}  // namespace

TEST_CASE("Trainer(model) uses the model's train: section and refuses a model without one") {
  const std::string bare = write_model("bare", "");
  Model model = Model::load(bare);
  CHECK_THROWS_AS(Trainer(model), UserError);
  CHECK_THROWS_WITH(Trainer(model), Catch::Contains("model 'small' has no train: section") &&
                                        Catch::Contains("Trainer(model, TrainingSpec{...})"));
  TrainingSpec no_optimizer;
  no_optimizer.optimizer.name.clear();
  CHECK_THROWS_WITH(Trainer(model, no_optimizer), Catch::Contains("name no optimizer"));

  // with train:, Trainer(model) is Trainer(model, *model.graph().training)
  const std::string with_train = write_model("train", "train: {optimizer: {name: adam, lr: 0.01}}\n");
  Model a = Model::load(with_train), b = Model::load(with_train);
  a.init_parameters(4);
  b.init_parameters(4);
  Trainer ta(a), tb(b, *b.graph().training);
  for (int step = 0; step < 3; ++step) {
    TensorMap batch = a.random_inputs({{"batch", 8}}, 10 + step);
    batch.merge(a.random_targets({{"batch", 8}}, 10 + step));
    const double la = ta.step(batch), lb = tb.step(batch);
    CHECK(std::isfinite(la));
    CHECK(la == lb);
  }
  std::filesystem::remove(bare);
  std::filesystem::remove(with_train);
}
