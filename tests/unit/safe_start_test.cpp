// Training runs that are safe to start: every file a command will write is checked before
// any work (exit code 2, naming the flag and the path); a resumed run goes on saving where
// it was saved, counts its own steps and lays a cosine schedule over its new length, saying
// so; a model file's relative data path is found next to that file, and one that cannot be
// opened is reported where the file names it.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numbers>
#include <string>

#include "runtime/io/safetensors.h"
#include "runtime/trainer.h"
#include "unit_test_support.h"

using namespace tandem;
using tandem::testing::json_summary;
using tandem::testing::run_cli;
using tandem::testing::seeded_rng;

namespace {

/// A scratch directory, removed afterwards.
struct Scratch {
  std::filesystem::path dir = std::filesystem::temp_directory_path() / ("tandem-safe-start-" + std::to_string(getpid()));
  Scratch() {
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
  }
  ~Scratch() { std::filesystem::remove_all(dir); }
  std::string path(const std::string& name) const { return (dir / name).string(); }
  std::string write(const std::string& name, const std::string& text) const {
    std::filesystem::create_directories((dir / name).parent_path());
    std::ofstream(path(name)) << text;
    return path(name);
  }
};

/// `samples` rows of 4 random features and a class in [0, 3).
std::string random_csv(std::mt19937_64& rng, int samples) {
  std::normal_distribution<float> value;
  std::uniform_int_distribution<int> label(0, 2);
  std::string text;
  for (int i = 0; i < samples; ++i) {
    for (int j = 0; j < 4; ++j) text += std::to_string(value(rng)) + ",";
    text += std::to_string(label(rng)) + "\n";
  }
  return text;
}

/// A linear classifier of 4 features into 3 classes, trained with `schedule` from `data`.
std::string model_yaml(const std::string& data, const std::string& schedule = "{name: cosine}") {
  return R"(name: safe_start
inputs:
  x: {shape: [batch, 4]}
targets:
  label: {shape: [batch], dtype: int64}
layers:
  - {name: fc, op: linear, in_features: 4, out_features: 3}
loss: {op: cross_entropy, input: fc, target: label}
train:
  batch: 4
  optimizer: {name: sgd, lr: 0.5}
  schedule: )" + schedule + R"(
  data:
    path: )" + data + "\n";
}

/// Runs tandem; checks exit code 2 and that the output holds every part.
std::string refused(const std::string& args, const std::vector<std::string>& parts) {
  int code = 0;
  const std::string out = run_cli(args, &code, "env -u TANDEM_SIM_GPUS ", 60);
  INFO("tandem " << args << "\n" << out);
  CHECK(code == 2);
  for (const std::string& part : parts) CHECK_THAT(out, Catch::Contains(part));
  CHECK_THAT(out, !Catch::Contains("internal error"));
  return out;
}

std::string succeeds(const std::string& args, const std::string& prefix = "") {
  int code = 0;
  const std::string out = run_cli(args, &code, "env -u TANDEM_SIM_GPUS " + prefix, 120);
  INFO("tandem " << args << "\n" << out);
  REQUIRE(code == 0);
  return out;
}

}  // namespace

TEST_CASE("an output that cannot be written is refused before any work, naming its flag", "[cli][train][outputs]") {
  auto rng = seeded_rng("outputs checked first");
  Scratch s;
  const std::string data = s.write("data.csv", random_csv(rng, 10));
  const std::string model = s.write("model.yaml", model_yaml(data));
  const std::string weights = s.path("final.safetensors");
  const std::string missing_dir = s.path("no-such-dir/ckpt.safetensors");

  // a checkpoint into a directory that is not there: refused at once, nothing written
  auto start = std::chrono::steady_clock::now();
  refused("train " + model + " --epochs 50 --save " + missing_dir + " --save-weights " + weights,
          {"--save '" + missing_dir + "'", "does not exist"});
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(20));
  CHECK_FALSE(std::filesystem::exists(weights));

  refused("train " + model + " --save-weights " + s.dir.string(), {"--save-weights '" + s.dir.string() + "'", "is a directory"});
  refused("train " + model + " --save " + s.write("file", "x") + "/ckpt.safetensors", {"is not a directory"});
  // outputs that would destroy an input, or each other
  refused("train " + model + " --save-weights " + data, {"--save-weights '" + data + "' is the file the training data reads"});
  refused("train " + model + " --save " + model, {"--save '" + model + "' is the file the model file reads"});
  refused("train " + model + " --save " + weights + " --save-weights " + weights, {"is also --save's file"});
  CHECK(std::ifstream(data).peek() != EOF);  // the data is still there

  // run and plan check theirs alike
  const std::string inputs = s.path("inputs.safetensors");
  TensorMap x;
  Tensor t = Tensor::empty({2, 4}, DType::float32);
  for (float& v : t.span<float>()) v = std::normal_distribution<float>()(rng);
  x.emplace("x", t);
  write_safetensors(inputs, x);
  refused("run " + model + " --inputs " + inputs + " --outputs " + inputs, {"--outputs '" + inputs + "' is the file --inputs reads"});
  refused("run " + model + " --outputs " + missing_dir, {"--outputs '" + missing_dir + "'", "does not exist"});
  refused("plan " + model + " --dot " + missing_dir, {"--dot '" + missing_dir + "'", "does not exist"});
  CHECK(read_safetensors(inputs).at("x").to_vector<float>() == t.to_vector<float>());
}

TEST_CASE("a resumed run goes on saving to its checkpoint, counts its own steps and tells of its longer schedule",
          "[cli][train][checkpoint]") {
  auto rng = seeded_rng("resume saves and counts");
  Scratch s;
  const std::string data = s.write("data.csv", random_csv(rng, 10));  // batch 4: 3 steps an epoch
  const std::string model = s.write("model.yaml", model_yaml(data));
  const std::string ckpt = s.path("ckpt.safetensors");
  succeeds("train " + model + " --epochs 2 --save " + ckpt);
  CHECK(read_safetensors_metadata(ckpt).at("epoch") == "2");

  std::string out = succeeds("train " + model + " --epochs 4 --resume " + ckpt);
  CHECK_THAT(out, Catch::Contains("note: resumed a run of 6 steps as one of 12: the cosine schedule now spans 12 steps"));
  CHECK_THAT(out, Catch::Contains("done: 6 steps in") && Catch::Contains("(steps 7 to 12 of the run)") &&
                      Catch::Contains("checkpoint " + ckpt));
  auto meta = read_safetensors_metadata(ckpt);  // the same file, now at the run's end
  CHECK(meta.at("epoch") == "4");
  CHECK(meta.at("step") == "12");
  CHECK(meta.at("total_steps") == "12");

  const nlohmann::json j = nlohmann::json::parse(json_summary(succeeds("train " + model + " --epochs 5 --json --no-save --resume " + ckpt)));
  CHECK(j["steps"] == 3);
  CHECK(j["resumed_at_step"] == 12);
  CHECK_FALSE(j.contains("checkpoint"));
  CHECK_THAT(j["notes"][0].get<std::string>(), Catch::Contains("now spans 15 steps"));
  CHECK(read_safetensors_metadata(ckpt).at("epoch") == "4");  // --no-save: untouched
  refused("train " + model + " --epochs 5 --no-save --save " + ckpt + " --resume " + ckpt, {"--no-save and --save"});
}

TEST_CASE("a resumed run with more epochs lays a cosine schedule over its own length, and a step schedule goes on",
          "[train][checkpoint][schedule]") {
  auto rng = seeded_rng("resumed schedule");
  Scratch s;
  const std::string data = s.write("data.csv", random_csv(rng, 10));
  const double base = std::uniform_real_distribution<double>(0.05, 0.5)(rng);
  for (const std::string schedule : {"cosine", "step"}) {
    INFO(schedule);
    const std::string model = s.write(schedule + ".yaml", model_yaml(data, schedule == "cosine"
                                                                               ? "{name: cosine, warmup_steps: 2}"
                                                                               : "{name: step, step_size: 4, gamma: 0.5}"));
    Model first = Model::load(model);
    TrainingSpec spec = *first.graph().training;
    spec.optimizer.lr = base;
    spec.epochs = 2;
    first.init_parameters(spec.seed);
    const Dataset train = load_dataset(*spec.data, data_columns(first.graph()));
    const std::string ckpt = s.path(schedule + ".safetensors");
    Trainer before(first, spec);
    before.fit(train, nullptr, ckpt, {});
    REQUIRE(before.steps_done() == 6);

    Model second = Model::load(model);
    spec.epochs = 5;  // 15 steps where the checkpoint's run had 6
    Trainer after(second, spec);
    std::vector<std::string> notes;
    after.set_notice([&](const std::string& text) { notes.push_back(text); });
    after.load_checkpoint(ckpt);
    // after step k (from 0) the next step's rate: steps 7 to 14 (step 6's is in the note)
    std::vector<double> lrs;
    after.fit(train, nullptr, "", {}, [&](int64_t, int64_t, double) { lrs.push_back(after.current_lr()); });
    lrs.pop_back();  // past the run's end
    REQUIRE(lrs.size() == 8);
    // torch's LambdaLR of these formulas (docs/training.md), over the new run's 15 steps
    auto expected = [&](int64_t k) {
      return schedule == "cosine" ? base * (1 + std::cos(std::numbers::pi * double(k - 2) / double(15 - 2))) / 2
                                  : base * std::pow(0.5, double(k / 4));
    };
    for (int64_t k = 7; k < 15; ++k) {
      CHECK(lrs[k - 7] == Approx(expected(k)).epsilon(1e-12));
      CHECK(lrs[k - 7] > 0);  // never the finished schedule's 0
    }
    if (schedule == "cosine") {
      REQUIRE(notes.size() == 1);
      char step6[32];
      std::snprintf(step6, sizeof step6, "%g", expected(6));
      CHECK(notes[0] == "resumed a run of 6 steps as one of 15: the cosine schedule now spans 15 steps, so the learning "
                        "rate goes from 0 to " + std::string(step6) + " at step 7");
    } else {
      CHECK(notes.empty());  // a step schedule does not depend on the run's length
    }
  }
}

TEST_CASE("a cosine schedule's total_steps that ends before the run is told, not silent", "[train][schedule]") {
  auto rng = seeded_rng("short cosine");
  Scratch s;
  const std::string data = s.write("data.csv", random_csv(rng, 10));
  const std::string model = s.write("model.yaml", model_yaml(data, "{name: cosine, total_steps: 4}"));
  CHECK_THAT(succeeds("train " + model + " --epochs 2"),
             Catch::Contains("note: the cosine schedule's total_steps 4 ends before this run's 6 steps: steps 5 to 6 "
                             "run at min_lr 0"));
}

TEST_CASE("a model file's relative data path is found next to it, from any directory", "[cli][train][data]") {
  auto rng = seeded_rng("relative data path");
  Scratch s;
  s.write("models/data/train.csv", random_csv(rng, 10));
  const std::string model = s.write("models/model.yaml", model_yaml("data/train.csv"));
  s.write("elsewhere/keep", "");
  // from another directory, with the model named relatively and absolutely
  for (const std::string& named : {std::string("../models/model.yaml"), model}) {
    const nlohmann::json j =
        nlohmann::json::parse(json_summary(succeeds("train " + named + " --json", "sh -c 'cd " + s.path("elsewhere") + " && exec \"$0\" \"$@\"' ")));
    CHECK(j["train_samples"] == 10);
  }
  // a flag's path stays relative to the working directory
  const nlohmann::json j = nlohmann::json::parse(json_summary(
      succeeds("train " + model + " --json --data ../models/data/train.csv", "sh -c 'cd " + s.path("elsewhere") + " && exec \"$0\" \"$@\"' ")));
  CHECK(j["train_samples"] == 10);

  // a file that cannot be opened is reported where the model file names it: line 14, column 11
  const std::string broken = s.write("models/broken.yaml", model_yaml("data/missing.csv"));
  refused("train " + broken, {broken + ":14:11: train: data: path names a file that cannot be read",
                              s.path("models/data/missing.csv")});
}
