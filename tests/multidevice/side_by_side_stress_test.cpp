// Replicas side by side under every OpenMP team size: each op family inside a data_parallel
// block of 1 to 8 simulated GPUs, trained a few steps with 1 to 4 OpenMP threads, as a
// child process under a deadline, so that a hang fails the test instead of stalling CI.
//
// Why: the engine runs a layer's replicas as members of one OpenMP team (backends/sim/
// host_lanes.h). How a kernel's own OpenMP constructs meet that team depends on how many
// members share a thread: 3 replicas on 2 threads once hung for ever inside oneDNN's batch
// norm, while 2 or 4 passed. So every count of replicas meets every team size here, and the
// loss after the steps must not depend on the team size: side by side or one after the
// other, each replica computes the same.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "graph/op_schema.h"

using namespace tandem;

namespace {

// Every op of a family, between the block's input and a linear head named `head` that
// scores 3 classes.
struct OpFamily {
  const char* name;
  const char* inputs;  // the graph's inputs: lines of YAML
  const char* layers;  // the block's layers: lines of YAML
  bool parallel_loss;  // each replica scores its own chunk (true) or the gathered output
};

const OpFamily op_families[] = {
    {"dense", "  x: {shape: [batch, 8]}\n",
     "      - {name: fc1, op: linear, in_features: 8, out_features: 16}\n"
     "      - {name: act1, op: relu}\n"
     "      - {name: drop, op: dropout, p: 0.25}\n"
     "      - {name: skip, op: stochastic_depth, p: 0.25}\n"
     "      - {name: fc2, op: linear, in_features: 16, out_features: 16, bias: false}\n"
     "      - {name: act2, op: gelu, approximate: tanh}\n"
     "      - {name: act3, op: tanh}\n"
     "      - {name: act4, op: sigmoid}\n"
     "      - {name: act5, op: relu6}\n"
     "      - {name: act6, op: hardswish}\n"
     "      - {name: act7, op: hardsigmoid}\n"
     "      - {name: act8, op: silu}\n"
     "      - {name: act9, op: mish}\n"
     "      - {name: head, op: linear, in_features: 16, out_features: 3}\n",
     false},
    {"normalization", "  x: {shape: [batch, 2, 4, 4]}\n",
     "      - {name: bn, op: batch_norm2d, num_features: 2}\n"
     "      - {name: flat, op: flatten}\n"
     "      - {name: ln, op: layer_norm, normalized_shape: 32}\n"
     "      - {name: head, op: linear, in_features: 32, out_features: 3}\n",
     true},
    {"convolution", "  x: {shape: [batch, 2, 6, 6]}\n",
     "      - {name: conv1, op: conv2d, in_channels: 2, out_channels: 4, kernel_size: 3, padding: 1}\n"
     "      - {name: shifted, op: roll, shifts: [-1, -1], dims: [2, 3]}\n"
     "      - {name: padded, op: pad, pad: [1, 1, 1, 1]}\n"
     "      - {name: pool1, op: max_pool2d, kernel_size: 2}\n"
     "      - {name: up, op: interpolate, size: [6, 6], mode: bilinear}\n"
     "      - {name: conv2, op: conv2d, in_channels: 4, out_channels: 4, kernel_size: 3, padding: same, bias: false}\n"
     "      - {name: pool2, op: avg_pool2d, kernel_size: 3}\n"
     "      - {name: flat, op: flatten}\n"
     "      - {name: head, op: linear, in_features: 16, out_features: 3}\n",
     false},
    {"sequence_convolution", "  x: {shape: [batch, 3, 12]}\n",
     "      - {name: conv1, op: conv1d, in_channels: 3, out_channels: 4, kernel_size: 3, padding: 1}\n"
     "      - {name: bn, op: batch_norm1d, num_features: 4}\n"
     "      - {name: pool1, op: max_pool1d, kernel_size: 2}\n"
     "      - {name: conv2, op: conv1d, in_channels: 4, out_channels: 4, kernel_size: 3, dilation: 2, padding: same, bias: false}\n"
     "      - {name: pool2, op: avg_pool1d, kernel_size: 3}\n"
     "      - {name: flat, op: flatten}\n"
     "      - {name: head, op: linear, in_features: 8, out_features: 3}\n",
     true},
    {"recurrent", "  x: {shape: [batch, 3, 4]}\n",
     "      - {name: gru, op: gru, input_size: 4, hidden_size: 5, batch_first: true, bidirectional: true}\n"
     "      - {name: lstm, op: lstm, input_size: 10, hidden_size: 4, num_layers: 2, batch_first: true}\n"
     "      - {name: flat, op: flatten}\n"
     "      - {name: head, op: linear, in_features: 12, out_features: 3}\n",
     true},
    {"attention", "  x: {shape: [batch, 3, 8]}\n",
     "      - {name: attn, op: multi_head_attention, embed_dim: 8, num_heads: 2, batch_first: true, causal: true}\n"
     "      - {name: flat, op: flatten}\n"
     "      - {name: head, op: linear, in_features: 24, out_features: 3}\n",
     false},
    {"embedding", "  tokens: {shape: [batch, 3], dtype: int64, high: 10}\n",
     "      - {name: emb, op: embedding, num_embeddings: 10, embedding_dim: 4}\n"
     "      - {name: flat, op: flatten}\n"
     "      - {name: bag, op: embedding_bag, num_embeddings: 10, embedding_dim: 4, mode: sum, inputs: tokens}\n"
     "      - {name: both, op: cat, dim: 1, inputs: [flat, bag]}\n"
     "      - {name: head, op: linear, in_features: 16, out_features: 3}\n",
     true},
    {"reductions", "  x: {shape: [batch, 3, 4]}\n",
     "      - {name: fc, op: linear, in_features: 4, out_features: 4}\n"
     "      - {name: top, op: amax, dim: 2, inputs: fc}\n"
     "      - {name: bottom, op: amin, dim: -1, inputs: fc}\n"
     "      - {name: total, op: sum, dim: [2], inputs: fc}\n"
     "      - {name: average, op: mean, dim: 2, keepdim: true, inputs: fc}\n"
     "      - {name: flat, op: flatten}\n"
     "      - {name: all, op: cat, dim: 1, inputs: [top, bottom, total, flat]}\n"
     "      - {name: head, op: linear, in_features: 12, out_features: 3}\n",
     false},
    {"elementwise_and_shape", "  x: {shape: [batch, 6]}\n",
     "      - {name: fc, op: linear, in_features: 6, out_features: 6}\n"
     "      - {name: prod, op: mul, inputs: [x, fc]}\n"
     "      - {name: sum, op: add, alpha: 0.5, inputs: [fc, prod]}\n"
     "      - {name: both, op: cat, dim: 1, inputs: [prod, sum]}\n"
     "      - {name: left, op: narrow, dim: 1, start: 0, length: 8}\n"
     "      - {name: right, op: narrow, dim: 1, start: 4, length: 8, inputs: both}\n"
     "      - {name: a, op: reshape, shape: [batch, 2, 4], inputs: left}\n"
     "      - {name: b, op: reshape, shape: [batch, 4, 2], inputs: right}\n"
     "      - {name: bt, op: permute, dims: [0, 2, 1]}\n"
     "      - {name: btt, op: permute, dims: [0, -1, 1]}\n"
     "      - {name: mm, op: matmul, inputs: [a, btt]}\n"
     "      - {name: token, op: parameter, shape: [1, 2, 2]}\n"
     "      - {name: tokens, op: expand, shape: [batch, 2, 2]}\n"
     "      - {name: scaled, op: mul, inputs: [mm, tokens]}\n"
     "      - {name: halved, op: scale, factor: 0.5}\n"
     "      - {name: ids, op: buffer, shape: [2], dtype: int64}\n"
     "      - {name: picked, op: index_select, dim: 1, inputs: [halved, ids]}\n"
     "      - {name: unit, op: normalize, dim: -1}\n"
     "      - {name: bounded, op: clamp, min: -0.5, max: 0.8}\n"
     "      - {name: grown, op: exp}\n"
     "      - {name: flat, op: flatten}\n"
     "      - {name: soft, op: softmax, dim: 1}\n"
     "      - {name: logsoft, op: log_softmax, dim: -1}\n"
     "      - {name: head, op: linear, in_features: 4, out_features: 3}\n",
     false},
};

constexpr int max_replicas = 8;
constexpr int max_threads = 4;
// A run takes well under a second; this only has to tell a hang from a loaded machine.
constexpr int deadline_seconds = 30;

std::string family_model(const OpFamily& family, int replicas) {
  std::string devices;
  for (int i = 0; i < replicas; ++i) devices += (i ? ", cuda:" : "cuda:") + std::to_string(i);
  std::string yaml = "name: side_by_side_" + std::string(family.name) + "\ninputs:\n" + family.inputs +
                     "targets:\n  label: {shape: [batch], dtype: int64}\nlayers:\n  - name: net\n"
                     "    data_parallel: {devices: [" + devices + "], output_device: cuda:0}\n    layers:\n" +
                     family.layers +
                     "loss: {op: cross_entropy, input: net.head, target: label, parallel: " +
                     (family.parallel_loss ? "true" : "false") + "}\ntrain:\n  optimizer: {name: sgd, lr: 0.1, momentum: 0.9}\n";
  std::string path = (std::filesystem::temp_directory_path() /
                      ("tandem_side_by_side_" + std::string(family.name) + "_" + std::to_string(replicas) + "_" +
                       std::to_string(getpid()) + ".yaml")).string();
  std::ofstream(path) << yaml;
  return path;
}

struct Run {
  int code = -1;  // 124: killed at the deadline
  std::string output;
};

// `tandem train` on random batches, 3 warm-up steps and 1 timed (--bench-steps), with
// `threads` OpenMP threads, killed at the deadline.
Run train_briefly(const std::string& model, int replicas, int batch, int threads) {
  const std::string cmd = "env -u TANDEM_SIM_GPUS OMP_NUM_THREADS=" + std::to_string(threads) + " timeout -k 5 " +
                          std::to_string(deadline_seconds) + " " + TANDEM_CLI + " train " + model + " --sim-gpus " +
                          std::to_string(replicas) + " --batch " + std::to_string(batch) +
                          " --bench-steps 1 --json 2>&1";
  Run run;
  FILE* pipe = popen(cmd.c_str(), "r");
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, pipe)) run.output.append(buf, n);
  const int status = pclose(pipe);
  run.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}

double loss_of(const Run& run) {
  const size_t start = run.output.find('{');
  REQUIRE(start != std::string::npos);
  return nlohmann::json::parse(run.output.substr(start)).at("loss").get<double>();
}

void stress(const std::string& name) {
  const auto found = std::find_if(std::begin(op_families), std::end(op_families),
                                  [&](const OpFamily& f) { return f.name == name; });
  REQUIRE(found != std::end(op_families));
  const OpFamily& family = *found;
  for (int replicas = 1; replicas <= max_replicas; ++replicas) {
    const std::string model = family_model(family, replicas);
    // R chunks either way: equal ones for an odd R (3 chunks of 2), a last one of 1 for an
    // even R (2, 2, 2, 1)
    const int batch = replicas % 2 == 1 ? 2 * replicas : 2 * replicas - 1;
    double serial_loss = 0;  // one thread: the replicas one after the other
    for (int threads = 1; threads <= max_threads; ++threads) {
      INFO(family.name << " in a data_parallel block of " << replicas << " simulated GPUs, batch " << batch << ", "
                       << threads << " OpenMP threads (" << model << ")");
      const Run run = train_briefly(model, replicas, batch, threads);
      if (run.code == 124 || run.code == 137) FAIL("hung: killed after " << deadline_seconds << " s\n" << run.output);
      INFO(run.output);
      REQUIRE(run.code == 0);
      const double loss = loss_of(run);
      REQUIRE(std::isfinite(loss));
      if (threads == 1) serial_loss = loss;
      else CHECK(std::fabs(loss - serial_loss) <= 1e-5 * std::max(1.0, std::fabs(serial_loss)));
    }
    std::filesystem::remove(model);
  }
}

}  // namespace

TEST_CASE("side by side replicas: every op is in a family below", "[side_by_side]") {
  for (const OpSchema* schema : all_op_schemas()) {
    INFO("op " << schema->name << ": add it to an op family of this test");
    CHECK(std::any_of(std::begin(op_families), std::end(op_families), [&](const OpFamily& f) {
      const std::string layers = f.layers;
      return layers.find("op: " + schema->name + ",") != std::string::npos ||
             layers.find("op: " + schema->name + "}") != std::string::npos;
    }));
  }
}

TEST_CASE("side by side replicas: dense ops under every team size", "[side_by_side][stress]") { stress("dense"); }
TEST_CASE("side by side replicas: normalization under every team size", "[side_by_side][stress]") {
  stress("normalization");
}
TEST_CASE("side by side replicas: convolution and pooling under every team size", "[side_by_side][stress]") {
  stress("convolution");
}
TEST_CASE("side by side replicas: 1-D convolution, pooling and batch norm under every team size",
          "[side_by_side][stress]") {
  stress("sequence_convolution");
}
TEST_CASE("side by side replicas: recurrent layers under every team size", "[side_by_side][stress]") {
  stress("recurrent");
}
TEST_CASE("side by side replicas: attention under every team size", "[side_by_side][stress]") {
  stress("attention");
}
TEST_CASE("side by side replicas: embeddings under every team size", "[side_by_side][stress]") {
  stress("embedding");
}
TEST_CASE("side by side replicas: reductions under every team size", "[side_by_side][stress]") {
  stress("reductions");
}
TEST_CASE("side by side replicas: elementwise and shape ops under every team size", "[side_by_side][stress]") {
  stress("elementwise_and_shape");
}
