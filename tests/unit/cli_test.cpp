// The tandem CLI: exit codes (0 ok, 2 for anything the user got wrong), messages, --help,
// and --json output.
#include <catch2/catch.hpp>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sys/wait.h>

#include "runtime/io/safetensors.h"
#include "runtime/model.h"

namespace {

struct Result {
  int code;
  std::string output;  // stdout and stderr together
};

Result run_cli(const std::string& args) {
  std::string cmd = std::string(TANDEM_CLI) + " " + args + " 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::string out;
  std::array<char, 4096> buf;
  while (size_t n = fread(buf.data(), 1, buf.size(), pipe)) out.append(buf.data(), n);
  int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

std::string config(const std::string& name) { return std::string(TANDEM_SOURCE_DIR) + "/configs/" + name; }

std::string scratch(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("tandem-cli-" + std::to_string(getpid()) + "-" + name)).string();
}

std::string write_file(const std::string& name, const std::string& text) {
  std::string path = scratch(name);
  std::ofstream(path) << text;
  return path;
}

}  // namespace

TEST_CASE("tandem check prints layers and exits 0 for a good model", "[cli]") {
  Result r = run_cli("check " + config("mlp_4x1024.yaml"));
  CHECK(r.code == 0);
  CHECK_THAT(r.output, Catch::Contains("hidden.2.fc") && Catch::Contains("[batch, 1024]") &&
                           Catch::Contains("4,198,400 parameters (4.2 M; 16.0 MiB as float32)"));
  Result j = run_cli("check --json " + config("seed_nested_dp.yaml"));
  REQUIRE(j.code == 0);
  auto json = nlohmann::json::parse(j.output);
  CHECK(json["layers"].size() == 3);
  CHECK(json["layers"][1]["path"] == "block2.fc");
  CHECK(json["layers"][1]["declared_device"] == "dp[cuda:0,cuda:1]");
}

TEST_CASE("tandem check shows targets and the loss, and --json gives shapes as lists and attributes as an object",
          "[cli]") {
  Result r = run_cli("check " + config("digits_mlp.yaml"));
  REQUIRE(r.code == 0);
  CHECK_THAT(r.output, Catch::Contains("target label") && Catch::Contains("int64    [batch]"));
  CHECK_THAT(r.output, Catch::Contains("loss   cross_entropy(fc3, label), reduction mean, ignore_index -100"));
  CHECK_THAT(r.output, Catch::Contains("26,250 parameters (26.2 K; 102.5 KiB as float32)"));  // not "0.10 MiB"
  Result j = run_cli("check --json " + config("digits_mlp.yaml"));
  REQUIRE(j.code == 0);
  const auto json = nlohmann::json::parse(j.output);
  CHECK(json["inputs"][0]["shape"] == nlohmann::json::array({"batch", 64}));
  CHECK(json["targets"][0]["name"] == "label");
  CHECK(json["targets"][0]["shape"] == nlohmann::json::array({"batch"}));
  CHECK(json["loss"]["op"] == "cross_entropy");
  CHECK(json["loss"]["input"] == "fc3");
  CHECK(json["loss"]["target"] == "label");
  const auto& fc1 = json["layers"][1];
  REQUIRE(fc1["path"] == "fc1");
  CHECK(fc1["output_shape"] == nlohmann::json::array({"batch", 128}));
  CHECK(fc1["attributes"]["in_features"] == 64);
  CHECK(fc1["attributes"]["bias"] == true);
  CHECK(json["parameter_bytes"] == json["parameters"].get<int64_t>() * 4);
}

TEST_CASE("a simulated GPU's memory without a unit is refused, naming the units", "[cli][errors]") {
  for (const std::string& args : std::vector<std::string>{"devices --sim-gpus 1 --sim-gpu-memory 4",
                                  "run " + config("seed_mlp.yaml") + " --sim-gpus 1 --sim-gpu-memory 4"}) {
    Result r = run_cli(args);
    INFO(args << "\n" << r.output);
    CHECK(r.code == 2);
    CHECK_THAT(r.output, Catch::Contains("memory size '4' has no unit: write 4GiB, 4MiB or 4GB (4B if you mean bytes)"));
  }
  Result r = run_cli("devices --sim-gpus 1 --sim-gpu-memory 4GiB");
  CHECK(r.code == 0);
  CHECK_THAT(r.output, Catch::Contains("4.0 GiB"));
}

TEST_CASE("user errors exit with code 2 and say what is wrong", "[cli][errors]") {
  std::string bad = write_file("bad.yaml", "name: m\ninputs:\n  x: {shape: [batch, 4]}\nlayers:\n  - {op: linear, in_features: 5, out_features: 2}\n");
  Result r = run_cli("check " + bad);
  CHECK(r.code == 2);
  CHECK_THAT(r.output, Catch::Contains(bad + ":5:5: layer '0': the input's last dimension is 4 but in_features is 5"));
  CHECK(run_cli("run " + bad).code == 2);
  CHECK_THAT(run_cli("check /nonexistent.yaml").output, Catch::Contains("/nonexistent.yaml: cannot open: No such file or directory"));
  CHECK(run_cli("check /nonexistent.yaml").code == 2);

  Result no_weights = run_cli("run " + config("seed_mlp.yaml") + " --weights /nonexistent.safetensors");
  CHECK(no_weights.code == 2);
  CHECK_THAT(no_weights.output, Catch::Contains("/nonexistent.safetensors: cannot open: No such file"));
  std::string garbage = write_file("garbage.safetensors", "this is not a safetensors file at all");
  Result bad_inputs = run_cli("run " + config("seed_mlp.yaml") + " --inputs " + garbage);
  CHECK(bad_inputs.code == 2);
  CHECK_THAT(bad_inputs.output, Catch::Contains(garbage));

  CHECK(run_cli("run " + config("seed_mlp.yaml") + " --batch 0").code == 2);
  Result bind = run_cli("run " + config("seed_mlp.yaml") + " --bind seq");
  CHECK(bind.code == 2);
  CHECK_THAT(bind.output, Catch::Contains("--bind 'seq' must be NAME=VALUE"));
  Result unknown = run_cli("run " + config("seed_mlp.yaml") + " --bind seq=4");
  CHECK(unknown.code == 2);
  CHECK_THAT(unknown.output, Catch::Contains("has no symbol 'seq'") && Catch::Contains("its symbols: batch"));
  Result text = run_cli("train " + config("dp_classifier.yaml") + " --bench-steps 1 --bind batch=abc");
  CHECK(text.code == 2);  // was std::stoll's exception, exit code 1
  CHECK_THAT(text.output, Catch::Contains("whole number VALUE"));
  CHECK(run_cli("plan " + config("recommender.yaml") + " --bind tags=0").code == 2);
  Result unbound = run_cli("run " + config("recommender.yaml") + " --batch 2");
  CHECK(unbound.code == 2);
  CHECK_THAT(unbound.output, Catch::Contains("give its value with --bind tags=N"));
  Result flag = run_cli("run " + config("seed_mlp.yaml") + " --bacth 3");
  CHECK(flag.code == 2);
  CHECK(run_cli("frobnicate").code == 2);
  CHECK(run_cli("").code == 2);
}

TEST_CASE("inputs from a file are checked and bad indices name the layer", "[cli][errors]") {
  std::string path = scratch("inputs.safetensors");
  tandem::TensorMap inputs;
  inputs["tokens"] = tandem::Tensor::from_vector<int64_t>({3}, {1, 2, 1000});
  tandem::write_safetensors(path, inputs);
  Result r = run_cli("run " + config("seed_mixed.yaml") + " --sim-gpus 1 --inputs " + path);
  CHECK(r.code == 2);
  CHECK_THAT(r.output, Catch::Contains("layer 'embedding'") && Catch::Contains("1000"));
  inputs["tokens"] = tandem::Tensor::from_vector<int64_t>({3}, {1, 2, 999});
  tandem::write_safetensors(path, inputs);
  CHECK(run_cli("run " + config("seed_mixed.yaml") + " --sim-gpus 1 --inputs " + path).code == 0);
  Result conflict = run_cli("run " + config("seed_mixed.yaml") + " --sim-gpus 1 --inputs " + path + " --batch 4");
  CHECK(conflict.code == 2);
  CHECK_THAT(conflict.output, Catch::Contains("--batch says 4"));
}

TEST_CASE("every subcommand has --help", "[cli]") {
  for (std::string sub : {"", "check ", "run ", "devices "}) {
    Result r = run_cli(sub + "--help");
    INFO(sub);
    CHECK(r.code == 0);
    CHECK_THAT(r.output, Catch::Contains("Usage") || Catch::Contains("usage"));
  }
  CHECK_THAT(run_cli("run --help").output, Catch::Contains("--weights") && Catch::Contains("--json"));
}

TEST_CASE("tandem run --json is machine-readable and --outputs writes safetensors", "[cli]") {
  std::string out = scratch("out.safetensors");
  Result r = run_cli("run " + config("seed_mlp.yaml") + " --batch 3 --seed 5 --json --repeat 5 --outputs " + out);
  REQUIRE(r.code == 0);
  auto json = nlohmann::json::parse(r.output);
  CHECK(json["model"] == "seed_mlp");
  CHECK(json["bindings"]["batch"] == 3);
  CHECK(json["outputs"]["block3"]["shape"] == std::vector<int>{3, 20});
  CHECK(json["outputs"]["block3"]["values"].size() == 60);
  CHECK(json["timing"]["median_ms"].get<double>() > 0);
  tandem::TensorMap written = tandem::read_safetensors(out);
  std::vector<float> values = written.at("block3").to_vector<float>();
  for (size_t i = 0; i < values.size(); ++i) CHECK(values[i] == json["outputs"]["block3"]["values"][i].get<float>());
  // the same seed gives the same result; another seed another
  CHECK(nlohmann::json::parse(run_cli("run " + config("seed_mlp.yaml") + " --batch 3 --seed 5 --json").output)["outputs"] ==
        json["outputs"]);
  CHECK(nlohmann::json::parse(run_cli("run " + config("seed_mlp.yaml") + " --batch 3 --seed 6 --json").output)["outputs"] !=
        json["outputs"]);
}

TEST_CASE("tandem devices lists the cpu and explains missing GPUs", "[cli]") {
  Result r = run_cli("devices --json");
  REQUIRE(r.code == 0);
  auto json = nlohmann::json::parse(r.output);
  CHECK(json["devices"][0]["device"] == "cpu");
  CHECK(json["devices"][0]["memory_bytes"].get<int64_t>() > 0);
  if (json["devices"].size() == 1) CHECK(!json["no_gpu_reason"].get<std::string>().empty());
}

TEST_CASE("tandem run summarises NaN and infinite outputs by count, not as a range of inf to -inf", "[cli]") {
  // seed_mlp with block1's weights NaN: every output is NaN; block3's bias +inf in one place
  tandem::Model model = tandem::Model::load(config("seed_mlp.yaml"));
  model.init_parameters(0);
  auto copy_of_weights = [&] {  // parameters() shares the model's storage
    tandem::TensorMap copy;
    for (const auto& [name, t] : model.parameters()) copy.emplace(name, t.clone());
    return copy;
  };
  tandem::TensorMap weights = copy_of_weights();
  for (float& w : weights.at("block1.weight").span<float>()) w = NAN;
  const std::string all_nan = scratch("nan_weights.safetensors");
  tandem::write_safetensors(all_nan, weights);
  Result text = run_cli("run " + config("seed_mlp.yaml") + " --weights " + all_nan);
  CHECK(text.code == 0);
  CHECK_THAT(text.output, Catch::Contains("mean nan  std nan  min nan  max nan  (20 of 20 values are NaN)"));
  Result json = run_cli("run " + config("seed_mlp.yaml") + " --weights " + all_nan + " --json");
  REQUIRE(json.code == 0);
  auto out = nlohmann::json::parse(json.output)["outputs"]["block3"];
  CHECK(out["min"].is_null());
  CHECK(out["max"].is_null());
  CHECK(out["nan_count"] == 20);

  tandem::TensorMap finite = copy_of_weights();
  finite.at("block3.bias").span<float>()[4] = INFINITY;
  const std::string one_inf = scratch("inf_weights.safetensors");
  tandem::write_safetensors(one_inf, finite);
  Result inf = run_cli("run " + config("seed_mlp.yaml") + " --weights " + one_inf);
  CHECK(inf.code == 0);
  CHECK_THAT(inf.output, Catch::Contains("max inf  (1 infinite of 20)"));
  std::filesystem::remove(all_nan);
  std::filesystem::remove(one_inf);
}

TEST_CASE("train's help shows --shuffle and --no-shuffle readably, and giving both is refused", "[cli]") {
  Result help = run_cli("train --help");
  REQUIRE(help.code == 0);
  CHECK_THAT(help.output, !Catch::Contains("Excludes"));
  CHECK_THAT(help.output, Catch::Contains("  --no-shuffle                train on the data in its order (the opposite of --shuffle)"));
  Result both = run_cli("train " + config("digits_mlp.yaml") + " --shuffle --no-shuffle --epochs 1");
  CHECK(both.code == 2);
  CHECK_THAT(both.output, Catch::Contains("--shuffle and --no-shuffle contradict each other: give one"));
  both = run_cli("train " + config("digits_mlp.yaml") + " --keep-last --drop-last --epochs 1");
  CHECK(both.code == 2);
  CHECK_THAT(both.output, Catch::Contains("--drop-last and --keep-last contradict each other: give one"));
}
