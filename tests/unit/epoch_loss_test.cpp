// An epoch's training loss weights each step's loss by its samples: a short last batch
// counts by its size, so the loss is the epoch's mean per-sample loss (docs/training.md).
#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "unit_test_support.h"

using tandem::testing::json_summary;
using tandem::testing::run_cli;
using tandem::testing::seeded_rng;

namespace {

std::string scratch(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("tandem-epoch-loss-" + std::to_string(getpid()) + "-" + name)).string();
}

}  // namespace

TEST_CASE("an epoch's train_loss is its step losses weighted by their samples", "[train][cli]") {
  auto rng = seeded_rng("epoch loss by samples");
  std::normal_distribution<float> value;
  std::uniform_int_distribution<int> label(0, 2);
  const std::string data = scratch("data.csv"), model = scratch("model.yaml");
  {
    std::ofstream csv(data);
    for (int i = 0; i < 10; ++i) csv << value(rng) << "," << value(rng) << "," << value(rng) << "," << label(rng) << "\n";
  }
  for (const std::string reduction : {"mean", "sum"}) {
    INFO(reduction);
    std::ofstream(model) << "name: epoch_loss\ninputs:\n  x: {shape: [batch, 3]}\ntargets:\n"
                            "  label: {shape: [batch], dtype: int64}\nlayers:\n"
                            "  - {name: fc, op: linear, in_features: 3, out_features: 3}\n"
                            "loss: {op: cross_entropy, input: fc, target: label, reduction: "
                         << reduction << "}\ntrain: {batch: 4, optimizer: {name: sgd, lr: 0.3}, data: {path: " << data
                         << "}}\n";
    int code = 0;
    const std::string out = run_cli("train " + model + " --epochs 2 --json", &code);
    INFO(out);
    REQUIRE(code == 0);
    const nlohmann::json summary = nlohmann::json::parse(json_summary(out));  // alive through the loop
    for (const auto& epoch : summary["epochs"]) {
      const std::vector<double> l = epoch["step_losses"].get<std::vector<double>>();
      REQUIRE(l.size() == 3);  // 10 samples in batches of 4: 4, 4 and 2
      const double expected = reduction == "mean" ? (4 * l[0] + 4 * l[1] + 2 * l[2]) / 10 : (l[0] + l[1] + l[2]) / 3;
      CHECK(epoch["train_loss"].get<double>() == Approx(expected).epsilon(1e-12));
      if (reduction == "mean") CHECK(std::abs(expected - (l[0] + l[1] + l[2]) / 3) > 0);  // not the plain mean
    }
  }
  std::filesystem::remove(data);
  std::filesystem::remove(model);
}
