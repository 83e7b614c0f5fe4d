// Training: a resumed run equals an uninterrupted one bit for bit; a process killed while
// writing checkpoints never leaves a broken one; data and settings errors exit with 2;
// the digits MLP learns; a sequence-first model is fed from samples-first data.
#include <catch2/catch.hpp>

#include <cmath>
#include <csignal>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

#include "graph/load_graph.h"
#include "runtime/io/safetensors.h"
#include "runtime/trainer.h"
#include "unit_test_support.h"

using namespace tandem;
using tandem::testing::json_summary;
using tandem::testing::run_cli;

namespace {

std::string config(const std::string& name) { return std::string(TANDEM_SOURCE_DIR) + "/configs/" + name; }
std::string scratch(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("tandem-train-" + std::to_string(getpid()) + "-" + name)).string();
}

struct Interrupted {};

Dataset digits(const Model& model) {
  return load_dataset(*model.graph().training->data, data_columns(model.graph()));
}

}  // namespace

TEST_CASE("a run resumed from a checkpoint ends with the same weights bit for bit", "[train][checkpoint]") {
  Model reference = Model::load(config("digits_mlp.yaml"));
  TrainingSpec spec = *reference.graph().training;
  spec.epochs = 4;
  auto [train, validation] = split_dataset(digits(reference), spec.validation_split, spec.seed);
  reference.init_parameters(spec.seed);
  Trainer uninterrupted(reference, spec);
  uninterrupted.fit(train, nullptr, "", {});

  std::string ckpt = scratch("resume.safetensors");
  Model first = Model::load(config("digits_mlp.yaml"));
  first.init_parameters(spec.seed);
  Trainer interrupted(first, spec);
  REQUIRE_THROWS_AS(interrupted.fit(train, nullptr, ckpt,
                                    [](const EpochReport& r) {
                                      if (r.epoch == 1) throw Interrupted{};  // dies after epoch 2's checkpoint
                                    }),
                    Interrupted);
  Model second = Model::load(config("digits_mlp.yaml"));
  second.init_parameters(spec.seed + 99);  // the checkpoint must override everything
  Trainer resumed(second, spec);
  resumed.load_checkpoint(ckpt);
  CHECK(resumed.epochs_done() == 2);
  resumed.fit(train, nullptr, "", {});
  CHECK(resumed.steps_done() == uninterrupted.steps_done());
  for (const auto& [name, p] : reference.parameters()) {
    INFO(name);
    CHECK(second.parameters().at(name).to_vector<float>() == p.to_vector<float>());
  }
  std::filesystem::remove(ckpt);
}

TEST_CASE("killing a training process while it writes checkpoints never leaves a broken one", "[train][checkpoint]") {
  std::string ckpt = scratch("killed.safetensors");
  std::mt19937 rng(std::random_device{}());
  for (int round = 0; round < 6; ++round) {
    std::filesystem::remove(ckpt);
    pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      int devnull = open("/dev/null", O_WRONLY);
      dup2(devnull, 1);
      dup2(devnull, 2);
      execl(TANDEM_CLI, TANDEM_CLI, "train", config("digits_mlp.yaml").c_str(), "--epochs", "1000", "--batch", "1024",
            "--validation-split", "0", "--save", ckpt.c_str(), nullptr);
      _exit(127);
    }
    // wait for the first checkpoint, then kill at a random moment of the rewrites that follow
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!std::filesystem::exists(ckpt) && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 200000));
    kill(child, SIGKILL);
    waitpid(child, nullptr, 0);
    REQUIRE(std::filesystem::exists(ckpt));
    INFO("round " << round);
    TensorMap loaded = read_safetensors(ckpt);  // never throws: the file is whole
    CHECK(loaded.count("fc1.weight") == 1);
    CHECK(read_safetensors_metadata(ckpt).count("tandem_checkpoint") == 1);
  }
  for (const auto& entry : std::filesystem::directory_iterator(std::filesystem::temp_directory_path()))
    if (entry.path().string().starts_with(ckpt)) std::filesystem::remove(entry.path());
}

TEST_CASE("the digits MLP reaches 97% validation accuracy", "[train][digits]") {
  int code = 0;
  std::string out = run_cli("train " + config("digits_mlp.yaml") + " --json", &code);
  REQUIRE(code == 0);
  auto json = nlohmann::json::parse(json_summary(out));
  INFO(out);
  CHECK(json["validation_samples"] == 359);
  CHECK(json["train_samples"] == 1438);
  CHECK(json["validation_accuracy"].get<double>() >= 0.97);
  // the loss falls
  CHECK(json["epochs"].back()["train_loss"].get<double>() < json["epochs"][0]["train_loss"].get<double>() / 10);
}

TEST_CASE("bad training data and settings exit with code 2 and say where", "[train][errors][cli]") {
  auto write = [](const std::string& name, const std::string& text) {
    std::string path = scratch(name);
    std::ofstream(path) << text;
    return path;
  };
  std::string row(63, ','), good_row;
  for (int i = 0; i < 64; ++i) good_row += "1,";
  struct Case {
    std::string file, message;
  } cases[] = {
      {write("short.csv", good_row + "3\n" + good_row.substr(2) + "3\n"), "short.csv:2"},
      {write("text.csv", good_row + "3\n" + "x," + good_row.substr(2) + "3\n"), "text.csv:2"},
      {write("label.csv", good_row + "12\n"), "label.csv:1"},
      {write("empty.csv", ""), "empty.csv"},
  };
  for (const Case& c : cases) {
    int code = 0;
    std::string out = run_cli("train " + config("digits_mlp.yaml") + " --epochs 1 --data " + c.file, &code);
    INFO(out);
    CHECK(code == 2);
    CHECK_THAT(out, Catch::Contains(c.message));
  }
  int code = 0;
  std::string out = run_cli("train " + config("seed_mlp.yaml") + " --data " + cases[0].file, &code);
  CHECK(code == 2);
  CHECK_THAT(out, Catch::Contains("has no loss"));
  out = run_cli("train " + config("digits_mlp.yaml") + " --resume /nonexistent.safetensors", &code);
  CHECK(code == 2);
  out = run_cli("train " + config("digits_mlp.yaml") + " --resume " + cases[0].file, &code);
  CHECK(code == 2);
  out = run_cli("train " + config("digits_mlp.yaml") + " --optimizer rmsprop", &code);
  CHECK(code == 2);
  out = run_cli("train " + config("digits_mlp.yaml") + " --validation-split 1.5", &code);
  CHECK(code == 2);
  CHECK_THAT(out, Catch::Contains("validation-split"));
}

TEST_CASE("a training loss that becomes NaN stops the run, naming the step, and keeps the last checkpoint",
          "[train][errors][cli]") {
  // SGD at 1e30 blows the weights up in one step: the second step's loss is NaN
  const std::string ckpt = scratch("nan.safetensors");
  int code = 0;
  std::string out = run_cli("train " + config("digits_mlp.yaml") + " --optimizer sgd --lr 1e30 --epochs 1 --save " +
                                ckpt,
                            &code);
  CHECK(code == 2);
  CHECK_THAT(out, Catch::Contains("error: step 2 (epoch 1): the training loss is NaN; the run stopped before updating "
                                  "the weights. Lower the learning rate (--lr)"));
  CHECK_FALSE(std::filesystem::exists(ckpt));  // no epoch finished: nothing half-trained was saved
}

TEST_CASE("tandem train --json reports every step's loss and a checkpoint that tandem run reads", "[train][cli]") {
  std::string ckpt = scratch("cli.safetensors");
  int code = 0;
  std::string out = run_cli("train " + config("digits_mlp.yaml") + " --epochs 2 --batch 256 --lr 0.01 --optimizer adam" +
                                " --validation-split 0 --json --save " + ckpt,
                            &code);
  REQUIRE(code == 0);
  auto json = nlohmann::json::parse(json_summary(out));
  CHECK(json["steps"] == 16);  // 1797 samples in batches of 256: 8 per epoch
  CHECK(json["epochs"][0]["step_losses"].size() == 8);
  CHECK(json["epochs"][1]["step_losses"].size() == 8);
  CHECK(json["epochs"][1]["step_losses"].back().get<double>() < json["epochs"][0]["step_losses"][0].get<double>());
  CHECK(run_cli("run " + config("digits_mlp.yaml") + " --weights " + ckpt + " --batch 2", &code).find("fc3") !=
        std::string::npos);
  CHECK(code == 0);
  // resuming a finished run trains no further
  out = run_cli("train " + config("digits_mlp.yaml") + " --epochs 2 --batch 256 --lr 0.01 --optimizer adam" +
                    " --validation-split 0 --json --resume " + ckpt,
                &code);
  CHECK(code == 0);
  CHECK(nlohmann::json::parse(json_summary(out))["epochs"].empty());
  std::filesystem::remove(ckpt);
}

TEST_CASE("tandem train without shuffling follows the data in order and saves plain weights", "[train][cli]") {
  // two runs with different seeds but the same start weights and no shuffling see the same
  // batches in the same order: they end with the same weights
  std::string start = scratch("start.safetensors"), a = scratch("a.safetensors"), b = scratch("b.safetensors");
  Model model = Model::load(config("digits_mlp.yaml"));
  model.init_parameters(3);
  model.save_weights(start);
  int code = 0;
  std::string common = "train " + config("digits_mlp.yaml") + " --epochs 1 --batch 100 --validation-split 0" +
                       " --no-shuffle --weights " + start;
  run_cli(common + " --seed 1 --save-weights " + a, &code);
  REQUIRE(code == 0);
  run_cli(common + " --seed 2 --save-weights " + b, &code);
  REQUIRE(code == 0);
  TensorMap wa = read_safetensors(a), wb = read_safetensors(b);
  CHECK(wa.size() == model.parameters().size());  // weights only: no optimizer state
  for (const auto& [name, t] : wa) CHECK(t.to_vector<float>() == wb.at(name).to_vector<float>());
  CHECK(wa.at("fc1.weight").to_vector<float>() != read_safetensors(start).at("fc1.weight").to_vector<float>());
  for (const std::string& f : {start, a, b}) std::filesystem::remove(f);
}

TEST_CASE("a sequence-first model is fed from data with its batch where it declares it", "[train][data]") {
  // tokens [T, batch] -> embedding -> linear -> logits [T·batch, V] vs target [T, batch]
  std::mt19937_64 rng(std::random_device{}());
  const int64_t t = 2 + static_cast<int64_t>(rng() % 6), v = 3 + static_cast<int64_t>(rng() % 9);
  INFO("t " << t << " v " << v);
  auto yaml = [&](const std::string& target_shape, const std::string& input_shape) {
    return "name: seq\ninputs:\n  tokens: {shape: " + input_shape + ", dtype: int64}\n"
           "targets:\n  next: {shape: " + target_shape + ", dtype: int64}\nlayers:\n"
           "  - {name: embed, op: embedding, num_embeddings: " + std::to_string(v) + ", embedding_dim: 4}\n"
           "  - {name: head, op: linear, in_features: 4, out_features: " + std::to_string(v) + "}\n"
           "  - {name: logits, op: flatten, start_dim: 0, end_dim: 1}\n"
           "loss: {op: cross_entropy, input: logits, target: next}\n";
  };
  const std::string seq_batch = "[" + std::to_string(t) + ", batch]";
  Graph g = load_graph_from_string(yaml(seq_batch, seq_batch), "seq.yaml");
  std::vector<ColumnSpec> columns = data_columns(g);
  REQUIRE(columns.size() == 2);
  for (const ColumnSpec& c : columns) {
    INFO(c.name);
    CHECK(c.batch_dim == 1);
    CHECK(c.sample_shape == Shape{t});
  }
  CHECK(columns[1].high == v);  // the class count, from the loss input
  CHECK(columns[1].ignored == -100);  // cross_entropy's default ignore_index is allowed too

  // a target that does not hold one index per row of the logits is refused at load
  CHECK_THROWS_WITH(load_graph_from_string(yaml("[" + std::to_string(t + 1) + ", batch]", seq_batch), "bad.yaml"),
                    Catch::Contains("needs an input [N, classes] and an int64 target [N]"));
  // two symbols: which one is the batch?
  Graph two = load_graph_from_string(yaml("[seq, batch]", "[seq, batch]"), "two.yaml");
  CHECK_THROWS_WITH(data_columns(two), Catch::Contains("exactly one dimension may be symbolic"));

  // training on samples-first data sees [T, B] batches: the loss is finite and falls
  Model model(load_graph_from_string(yaml(seq_batch, seq_batch), "seq.yaml"));
  const int64_t n = 64;
  std::vector<int64_t> tokens(static_cast<size_t>(n * t)), next(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = static_cast<int64_t>(rng() % static_cast<uint64_t>(v));
    next[i] = (tokens[i] + 1) % v;  // learnable: the next class of each token
  }
  Dataset data(TensorMap{{"tokens", Tensor::from_vector({n, t}, tokens)}, {"next", Tensor::from_vector({n, t}, next)}});
  TrainingSpec spec;
  spec.epochs = 5;
  spec.batch = 8;
  spec.optimizer.name = "adam";
  spec.optimizer.lr = 0.05;
  model.init_parameters(rng() % 1000);
  Trainer trainer(model, spec);
  EvalResult before = trainer.evaluate(data);
  trainer.fit(data, nullptr, "", {});
  EvalResult after = trainer.evaluate(data);
  CHECK(std::isfinite(before.loss));
  CHECK(after.loss < before.loss / 2);
  REQUIRE(after.accuracy);
  CHECK(*after.accuracy > 0.9);
}

namespace {

// A click model: four dense features, one logit, binary_cross_entropy_with_logits.
std::string click_yaml(const std::string& target) {
  std::string path = scratch("click.yaml");
  std::ofstream(path) << "name: click\ninputs:\n  x: {shape: [batch, 4]}\ntargets:\n  y: " << target
                      << "\nlayers:\n  - {name: fc, op: linear, in_features: 4, out_features: 1}\n"
                         "loss: {op: binary_cross_entropy_with_logits, input: fc, target: y}\n"
                         "train: {epochs: 3, batch: 16, validation_split: 0.25, optimizer: {name: sgd, lr: 0.5}}\n";
  return path;
}

}  // namespace

TEST_CASE("tandem train reports a click model's validation AUC, and says when it is undefined", "[train][auc][cli]") {
  std::mt19937_64 rng(std::random_device{}());
  const int64_t n = 400;
  std::vector<float> x(n * 4), y(n), ones(n, 1.0f);
  std::normal_distribution<float> normal(0, 1);
  for (int64_t i = 0; i < n; ++i) {
    for (int k = 0; k < 4; ++k) x[i * 4 + k] = normal(rng);
    y[i] = x[i * 4] - 0.5f * x[i * 4 + 2] + 0.5f * normal(rng) > 0 ? 1.0f : 0.0f;  // learnable, noisy
  }
  std::string yaml = click_yaml("{shape: [batch, 1]}"), data = scratch("clicks.safetensors"),
              one_class = scratch("all_clicks.safetensors");
  write_safetensors(data, {{"x", Tensor::from_vector({n, 4}, x)}, {"y", Tensor::from_vector({n, 1}, y)}});
  write_safetensors(one_class, {{"x", Tensor::from_vector({n, 4}, x)}, {"y", Tensor::from_vector({n, 1}, ones)}});
  int code = 0;
  std::string out = run_cli("train " + yaml + " --data " + data + " --seed " + std::to_string(rng() % 1000) + " --json", &code);
  INFO(out);
  REQUIRE(code == 0);
  auto json = nlohmann::json::parse(json_summary(out));
  REQUIRE(json["epochs"].size() == 3);
  for (const auto& e : json["epochs"]) CHECK(e["validation_auc"].get<double>() > 0.5);
  CHECK(json["validation_auc"].get<double>() > 0.85);  // the Bayes AUC of this signal is about 0.93
  CHECK_FALSE(json["epochs"][0].contains("validation_accuracy"));  // a binary loss has an AUC instead

  out = run_cli("train " + yaml + " --data " + data + " --epochs 1", &code);
  CHECK(code == 0);
  CHECK_THAT(out, Catch::Contains("val auc 0.") && Catch::Contains("validation AUC 0."));
  // every target 1: the AUC is undefined, said in the epoch line and the JSON, not a failure
  out = run_cli("train " + yaml + " --data " + one_class + " --epochs 1", &code);
  CHECK(code == 0);
  CHECK_THAT(out, Catch::Contains("val auc undefined (every target is 1: the AUC needs both classes)"));
  out = run_cli("train " + yaml + " --data " + one_class + " --epochs 1 --json", &code);
  CHECK(code == 0);
  json = nlohmann::json::parse(json_summary(out));
  CHECK(json["epochs"][0]["validation_auc"].is_null());
  CHECK_THAT(json["epochs"][0]["validation_auc_undefined"].get<std::string>(), Catch::Contains("every target is 1"));
  for (const std::string& f : {yaml, data, one_class}) std::filesystem::remove(f);
}

TEST_CASE("binary_cross_entropy_with_logits refuses a target of another dtype or shape", "[train][errors][cli]") {
  struct Case {
    std::string target, message;
  } cases[] = {
      {"{shape: [batch, 1], dtype: int64}", "needs a float32 target of the input's shape (input [batch, 1] float32, "
                                            "target [batch, 1] int64)"},
      {"{shape: [batch]}", "needs a float32 target of the input's shape (input [batch, 1] float32, target [batch] "
                           "float32)"},
      {"{shape: [batch, 2]}", "target [batch, 2] float32"},
  };
  for (const Case& c : cases) {
    INFO(c.target);
    CHECK_THROWS_WITH(load_graph(click_yaml(c.target)), Catch::Contains("binary_cross_entropy_with_logits") &&
                                                            Catch::Contains(c.message));
    int code = 0;
    std::string out = run_cli("check " + click_yaml(c.target), &code);
    CHECK(code == 2);
    CHECK_THAT(out, Catch::Contains(c.message) && Catch::Contains("click.yaml:"));
  }
  std::filesystem::remove(click_yaml("{shape: [batch, 1]}"));
  // data whose target has the wrong shape is refused when it is read, naming the tensor
  Model model = Model::load(click_yaml("{shape: [batch, 1]}"));
  TensorMap batch{{"x", Tensor::zeros({3, 4}, DType::float32)}, {"y", Tensor::zeros({3, 2}, DType::float32)}};
  CHECK_THROWS_WITH(model.loss_and_backward(batch, 0), Catch::Contains("input 'y': expected float32 [batch, 1]"));
  std::filesystem::remove(click_yaml("{shape: [batch, 1]}"));
}
