// `tandem plan`: the command runs placement on a model file and prints or draws the plan.
#include <catch2/catch.hpp>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <sys/wait.h>

using Catch::Matchers::Contains;

namespace {

struct Result {
  int code;
  std::string out;
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

const std::string kSeedMixed = std::string(TANDEM_SOURCE_DIR) + "/configs/seed_mixed.yaml";

}  // namespace

TEST_CASE("tandem plan --json on the seeds' mixed model with one simulated GPU") {
  Result r = run_cli("plan " + kSeedMixed + " --sim-gpus 1 --batch 4 --train --json");
  INFO(r.out);
  REQUIRE(r.code == 0);
  for (const char* field : {"\"layers\"", "\"copies\"", "\"devices\"", "\"reason\"", "\"peak_bytes\"",
                            "\"parameter_bytes\"", "\"activation_bytes\"", "\"direction\": \"backward\""})
    CHECK_THAT(r.out, Contains(field));
  CHECK_THAT(r.out, Contains("\"device\": \"cuda:0\""));
  CHECK_THAT(r.out, Contains("\"bytes\": 160"));  // [4, 10] float32
}

TEST_CASE("tandem plan prints a table with copies and per-device memory") {
  Result r = run_cli("plan " + kSeedMixed + " --sim-gpus 1");
  INFO(r.out);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Contains("device: cuda:0 on the layer"));
  CHECK_THAT(r.out, Contains("copies (bytes per batch)"));
  CHECK_THAT(r.out, Contains("predicted peak memory per device"));
}

TEST_CASE("tandem plan without --train plans at the model's train: batch and says which batch") {
  Result r = run_cli("plan " + std::string(TANDEM_SOURCE_DIR) + "/configs/digits_mlp.yaml");
  INFO(r.out);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Contains("inference, batch 32 (the model's train: batch)"));
  r = run_cli("plan " + std::string(TANDEM_SOURCE_DIR) + "/configs/digits_mlp.yaml --batch 5 --json");
  CHECK_THAT(r.out, Contains("\"batch\": 5") && Contains("\"batch_from\": \"--batch\""));
  r = run_cli("plan " + kSeedMixed + " --sim-gpus 1");  // no train: section
  CHECK_THAT(r.out, Contains("inference, batch 1 (run's default; give --batch N)"));
}

TEST_CASE("tandem plan --dot writes a Graphviz file") {
  std::filesystem::path dot = std::filesystem::temp_directory_path() / "tandem_plan_test.dot";
  std::filesystem::remove(dot);
  Result r = run_cli("plan " + kSeedMixed + " --sim-gpus 1 --dot " + dot.string());
  INFO(r.out);
  REQUIRE(r.code == 0);
  std::ifstream in(dot);
  std::stringstream text;
  text << in.rdbuf();
  CHECK_THAT(text.str(), Contains("digraph"));
  CHECK_THAT(text.str(), Contains("style=dashed"));
  std::filesystem::remove(dot);
}

TEST_CASE("tandem plan refuses a device the machine does not have with exit code 2") {
  Result r = run_cli("plan " + kSeedMixed + " --sim-gpus 0");
  CHECK(r.code == 2);
  CHECK_THAT(r.out, Contains("seed_mixed.yaml:8:5: layer 'rnn' is placed on cuda:0 (device: on the layer), but this "
                              "machine has no GPU"));
  CHECK_THAT(r.out, Contains("run it on simulated GPUs with --sim-gpus 1, or on the cpu with --place '*=cpu'"));
}

TEST_CASE("tandem plan --place and --placement options") {
  Result r = run_cli("plan " + kSeedMixed + " --sim-gpus 2 --place 'rnn=cuda:1' --json");
  INFO(r.out);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Contains("--place rnn=cuda:1"));
  Result bad = run_cli("plan " + kSeedMixed + " --sim-gpus 2 --place nonsense");
  CHECK(bad.code == 2);
  CHECK_THAT(bad.out, Contains("PATTERN=DEVICE"));
  Result policy = run_cli("plan " + kSeedMixed + " --sim-gpus 1 --placement fastest");
  CHECK(policy.code == 2);
  Result mem = run_cli("plan " + kSeedMixed + " --sim-gpus 1 --placement balanced --max-memory 1KiB --json");
  INFO(mem.out);
  CHECK(mem.code == 0);
}

TEST_CASE("check and plan widen the op column to the longest op, multi_head_attention") {
  // the column under a header starts where the header's name does, in every row
  auto column_at = [](const std::string& out, const std::string& header, const std::string& row_marker) {
    std::istringstream lines(out);
    std::string line, head, row;
    while (std::getline(lines, line)) {
      if (head.empty() && line.rfind("layer ", 0) == 0) head = line;
      if (row.empty() && line.find(row_marker) != std::string::npos) row = line;
    }
    REQUIRE(!head.empty());
    REQUIRE(!row.empty());
    const size_t at = head.find(header);
    REQUIRE(at != std::string::npos);
    REQUIRE(at > 0);
    return std::make_pair(row.size() > at ? row.substr(at) : std::string(), row[at - 1]);
  };
  const std::string model = std::string(TANDEM_SOURCE_DIR) + "/configs/transformer_encoder.yaml";
  Result check = run_cli("check " + model);
  REQUIRE(check.code == 0);
  auto [shape, before_shape] = column_at(check.out, "output shape", " multi_head_attention ");
  CHECK(shape.rfind("[", 0) == 0);
  CHECK(before_shape == ' ');
  Result plan = run_cli("plan " + model + " --batch 2");
  REQUIRE(plan.code == 0);
  auto [device, before_device] = column_at(plan.out, "device", " multi_head_attention ");
  CHECK(device.rfind("cpu ", 0) == 0);
  CHECK(before_device == ' ');
}
