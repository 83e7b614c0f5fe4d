// Mistakes a model file or command line can make that only show once a run gives the
// symbols values, places a data_parallel block or resumes a checkpoint: each exits with
// code 2 and a message naming the layer or file, never an internal error. (Each of these
// once ended in a failed assertion or an untyped exception.)
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "runtime/io/safetensors.h"
#include "unit_test_support.h"

using tandem::testing::run_cli;

namespace {

std::string scratch(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("tandem-bound-" + std::to_string(getpid()) + "-" + name)).string();
}

std::string write_file(const std::string& name, const std::string& text) {
  const std::string path = scratch(name);
  std::ofstream(path) << text;
  return path;
}

// Runs tandem with TANDEM_SIM_GPUS unset; checks exit code 2, the parts and no internal error.
void check_refused(const std::string& args, const std::vector<std::string>& parts) {
  int code = 0;
  const std::string out = run_cli(args, &code, "env -u TANDEM_SIM_GPUS ");
  INFO("tandem " << args << "\n" << out);
  CHECK(code == 2);
  for (const std::string& part : parts) CHECK_THAT(out, Catch::Contains(part));
  CHECK_THAT(out, !Catch::Contains("internal error"));
}

}  // namespace

TEST_CASE("a narrow past the end of a dimension the batch sizes is refused when the batch is known", "[cli][errors]") {
  const std::string model = write_file("narrow.yaml", R"(name: narrow_batch
inputs:
  x: {shape: [batch, 4]}
targets:
  y: {shape: [3, 4]}
layers:
  - {name: fc, op: linear, in_features: 4, out_features: 4}
  - {name: first, op: narrow, dim: 0, start: 0, length: 3}
loss: {op: mse_loss, input: first, target: y}
)");
  const std::vector<std::string> parts{model + ":8:5: layer 'first'", "start 0 + length 3 runs past dim 0 of size 2",
                                       "batch = 2"};
  for (const std::string devices : {"", " --sim-gpus 1 --place '*=cuda:0'"}) {
    check_refused("run " + model + " --batch 2" + devices, parts);
    check_refused("train " + model + " --bench-steps 1 --batch 2" + devices, parts);
  }
  int code = 0;
  run_cli("run " + model + " --batch 3", &code, "env -u TANDEM_SIM_GPUS ");
  CHECK(code == 0);
  std::filesystem::remove(model);
}

TEST_CASE("a data_parallel block cut along a dimension its layers need whole is refused", "[cli][errors]") {
  // dim 1 of [batch, 10] is the linear's features: each replica would get 3 of them
  const std::string model = write_file("dp_features.yaml", R"(name: dp_features
inputs:
  x: {shape: [batch, 10]}
targets:
  y: {shape: [batch], dtype: int64}
layers:
  - name: net
    data_parallel: {devices: [cuda:0, cuda:1, cuda:2, cuda:3], dim: 1}
    layers:
      - {name: fc, op: linear, in_features: 10, out_features: 5}
loss: {op: cross_entropy, input: net.fc, target: y}
)");
  const std::vector<std::string> parts{model + ":7:5: layer 'net.fc' in data_parallel block 'net'",
                                       "the input's last dimension is 3 but in_features is 10",
                                       "cuts 'x' [batch, 10] along dim 1 into chunks of 3, 3, 3, 1"};
  check_refused("plan " + model + " --sim-gpus 4", parts);
  check_refused("run " + model + " --sim-gpus 4 --batch 2", parts);
  check_refused("train " + model + " --sim-gpus 4 --batch 2 --bench-steps 1", parts);
  std::filesystem::remove(model);
}

TEST_CASE("a checkpoint whose counts are not counts is refused when resumed", "[cli][errors][checkpoint]") {
  const std::string data = write_file("data.csv", "0.5,1,2,3,0\n1,0.25,0,1,1\n-1,2,0.5,0,2\n0,0,1,1,1\n");
  const std::string model = write_file("resume.yaml", R"(name: resume
inputs:
  x: {shape: [batch, 4]}
targets:
  label: {shape: [batch], dtype: int64}
layers:
  - {name: fc, op: linear, in_features: 4, out_features: 3}
loss: {op: cross_entropy, input: fc, target: label}
train: {batch: 2, optimizer: {name: sgd, lr: 0.1}, data: {path: )" + data + "}}\n");
  const std::string checkpoint = scratch("checkpoint.safetensors");
  int code = 0;
  run_cli("train " + model + " --save " + checkpoint, &code, "env -u TANDEM_SIM_GPUS ");
  REQUIRE(code == 0);
  for (const char* key : {"step", "epoch", "total_steps", "seed", "batch"}) {
    for (const char* bad : {"-5", "12x", "", "99999999999999999999999"}) {
      tandem::TensorMap tensors = tandem::read_safetensors(checkpoint);
      auto meta = tandem::read_safetensors_metadata(checkpoint);
      meta[key] = bad;
      const std::string edited = scratch("edited.safetensors");
      tandem::write_safetensors(edited, tensors, meta);
      check_refused("train " + model + " --epochs 2 --resume " + edited,
                    {edited + ": the checkpoint's metadata field '" + key + "' = '" + bad + "' is "});
    }
  }
  run_cli("train " + model + " --epochs 2 --resume " + checkpoint, &code, "env -u TANDEM_SIM_GPUS ");
  CHECK(code == 0);
  for (const std::string& f : {data, model, checkpoint, scratch("edited.safetensors")}) std::filesystem::remove(f);
}
