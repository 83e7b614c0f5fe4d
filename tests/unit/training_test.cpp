// Training: a resumed run equals an uninterrupted one bit for bit; a process killed while
// writing checkpoints never leaves a broken one; data and settings errors exit with 2;
// the digits MLP learns.
#include <catch2/catch.hpp>

#include <csignal>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

#include "runtime/io/safetensors.h"
#include "runtime/trainer.h"

using namespace tandem;

namespace {

std::string config(const std::string& name) { return std::string(TANDEM_SOURCE_DIR) + "/configs/" + name; }
std::string scratch(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("tandem-train-" + std::to_string(getpid()) + "-" + name)).string();
}

struct Interrupted {};

Dataset digits(const Model& model) {
  return load_dataset(*model.graph().training->data, data_columns(model.graph()));
}

std::string run_cli(const std::string& args, int* code) {
  std::string cmd = std::string(TANDEM_CLI) + " " + args + " 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, pipe)) out.append(buf, n);
  int status = pclose(pipe);
  *code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
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
  auto json = nlohmann::json::parse(out);
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

TEST_CASE("tandem train --json reports every step's loss and a checkpoint that tandem run reads", "[train][cli]") {
  std::string ckpt = scratch("cli.safetensors");
  int code = 0;
  std::string out = run_cli("train " + config("digits_mlp.yaml") + " --epochs 2 --batch 256 --lr 0.01 --optimizer adam" +
                                " --validation-split 0 --json --save " + ckpt,
                            &code);
  REQUIRE(code == 0);
  auto json = nlohmann::json::parse(out);
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
  CHECK(nlohmann::json::parse(out)["epochs"].empty());
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
