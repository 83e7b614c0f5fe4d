// The cpu's predicted peak (placement/estimate.cpp) against the peak its pool measures
// (--report), on bundled models, training and inference: within 1.15x above the measured
// and never more than 5% below it (docs/placement.md, "Memory estimate"). A `sparse: true`
// table keeps the rows a batch looked up as its gradient: counted as a dense one, DLRM's
// 8 tables of 1,000,000 x 64 were predicted 3.8 GiB against 1.9 GiB measured. Inference
// lays the intermediates out in reused buffers (runtime/exec/buffer_plan.h), and the caller
// holds the inputs and outputs: counted as a live set, transformer_encoder was predicted
// 177 KiB against 241 KiB measured, char_gru 4.0 MiB against 4.5 MiB. In training a view
// (flatten, reshape) has no buffer of its own: counted as one, char_gru's cpu was 1.17x.
// Training frees what no backward reads after forward, and backward's gradients come and
// go layer by layer: counted as all kept plus the two largest gradients, digits_cnn's cpu
// was predicted 2.1 MiB against 1.4 MiB measured (1.46x).
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "../unit/unit_test_support.h"

using nlohmann::json;
using tandem::testing::run_cli;

namespace {

std::string config(const std::string& name) { return std::string(TANDEM_SOURCE_DIR) + "/configs/" + name; }

/// configs/dlrm.yaml with tables of 20,000 rows (its 8 x 256 MiB would crowd the suite):
/// still far more rows than a batch looks up.
std::string small_dlrm() {
  std::ifstream in(config("dlrm.yaml"));
  std::stringstream text;
  text << in.rdbuf();
  std::string yaml = text.str();
  const std::string from = "num_embeddings: 1000000", to = "num_embeddings: 20000";
  int replaced = 0;
  for (size_t at = yaml.find(from); at != std::string::npos; at = yaml.find(from, at + to.size()), ++replaced)
    yaml.replace(at, from.size(), to);
  REQUIRE(replaced == 8);
  const std::string path =
      (std::filesystem::temp_directory_path() / ("tandem-cpu-peak-" + std::to_string(getpid()) + "-dlrm.yaml")).string();
  std::ofstream(path) << yaml;
  return path;
}

/// The cpu's entry of the "devices" of a run's --json (train: the summary, its last line).
json cpu_device(const std::string& out) {
  const size_t last_line = out.rfind('\n', out.size() - 2);
  json j;
  try {
    j = json::parse(out);
  } catch (const json::exception&) {
    j = json::parse(out.substr(last_line == std::string::npos ? 0 : last_line + 1));
  }
  for (const json& d : j.at("devices"))
    if (d.at("device") == "cpu") return d;
  FAIL("no cpu in the report");
  return {};
}

}  // namespace

TEST_CASE("the cpu's predicted peak is within 1.15x of the measured one on bundled models") {
  const std::string dlrm = small_dlrm();
  const std::string cases[] = {
      "train " + dlrm + " --sim-gpus 2 --bench-steps 2",
      "train " + config("digits_mlp.yaml") + " --bench-steps 2",
      "train " + config("digits_cnn.yaml") + " --bench-steps 2",
      "train " + config("digits_cnn.yaml") + " --sim-gpus 1 --place 'conv2=cuda:0' --place 'bn2=cuda:0' --bench-steps 2",
      "train " + config("bert_mini.yaml") + " --sim-gpus 4 --bench-steps 2",
      "train " + config("dp_classifier.yaml") + " --sim-gpus 4 --bench-steps 2",
      "train " + config("char_gru.yaml") + " --sim-gpus 2 --bench-steps 2",
      "run " + dlrm + " --sim-gpus 2 --batch 512 --no-fusion",
  };
  std::vector<std::string> commands(std::begin(cases), std::end(cases));
  // inference: every bundled model, placed as its file says (4 simulated GPUs for those
  // that name GPUs), at batch 32
  for (const auto& entry : std::filesystem::directory_iterator(std::string(TANDEM_SOURCE_DIR) + "/configs")) {
    const std::string name = entry.path().filename().string();
    if (entry.path().extension() != ".yaml" || name == "dlrm.yaml") continue;  // dlrm: its small copy above
    // layer by layer: the estimate counts each layer's output; fused layers hold less
    // (their check below)
    std::string command = "run " + entry.path().string() + " --sim-gpus 4 --batch 32 --no-fusion";
    if (name == "recommender.yaml") command += " --bind tags=8";
    if (name == "transformer_encoder.yaml") command += " --bind seq=16";
    commands.push_back(command);
  }
  REQUIRE(commands.size() >= 19);
  for (const std::string& command : commands) {
    int code = 0;
    const std::string out = run_cli(command + " --report --json", &code);
    INFO(command << "\n" << out.substr(0, 2000));
    REQUIRE(code == 0);
    const json cpu = cpu_device(out);
    const double predicted = cpu.at("predicted_peak_bytes").get<double>(), measured = cpu.at("peak_bytes").get<double>();
    INFO("predicted " << predicted << " bytes, measured " << measured);
    // The estimate counts the worst order of frees; a run's lanes may free a scatter's
    // chunk (its copy done) before the gathered output arrives. On a model whose cpu holds
    // a few KiB that order alone is more than 15%: dp_tutorial measured 1408 or 1664 bytes
    // from run to run against 1664 predicted (CI, under ASan). So a few KiB may lie above.
    const double order_slack_bytes = 4096;
    CHECK(predicted <= std::max(1.15 * measured, measured + order_slack_bytes));
    CHECK(predicted >= 0.95 * measured);
  }
  std::filesystem::remove(dlrm);
}

TEST_CASE("the cpu's predicted peak bounds the measured one when layers are fused") {
  // a convolution with its batch norm and activation as one kernel writes no tensor in
  // between, and the region's tensors (in the workspace the device's memory counts) reuse
  // each other's memory: the layer-by-layer estimate is an upper bound
  for (const char* name : {"digits_cnn.yaml"}) {
    const std::string path = config(name);
    int code = 0;
    const std::string out = run_cli("run " + path + " --batch 32 --report --json", &code);
    INFO(name << "\n" << out.substr(0, 2000));
    REQUIRE(code == 0);
    const json cpu = cpu_device(out);
    const double predicted = cpu.at("predicted_peak_bytes").get<double>(), measured = cpu.at("peak_bytes").get<double>();
    INFO("predicted " << predicted << " bytes, measured " << measured);
    CHECK(measured > 0);
    CHECK(predicted >= 0.95 * measured);
  }
}
