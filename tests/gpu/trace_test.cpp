// CUDA lanes in a trace (issue 27, "a picture"): a small model split over the cpu and
// cuda:0 trains under a trace, and the CUDA backend's streams appear as tracks ("cuda:0
// compute", "cuda:0 copies in/out") whose spans were timed by CUDA events on the GPU and
// placed on the host's clock (backends/cuda/stream_spans.h). A trace is the process's and
// starts once, so the traced run is this test binary run again in a child process
// (TANDEM_TRACE in its environment), on the hidden test case below; this one reads its file.
#include <catch2/catch.hpp>

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/devices/device_registry.h"
#include "runtime/model.h"
#include "runtime/trainer.h"

extern char** environ;

using namespace tandem;

namespace {

using nlohmann::json;

constexpr int kSteps = 6;

// An embedding table on the cpu feeding linear layers on cuda:0: each step copies
// activations up and their gradients down, and runs kernels on the GPU.
constexpr const char* kSplitModel = R"(name: traced_split
inputs:
  ids: {shape: [batch, 4], dtype: int64}
targets:
  y: {shape: [batch, 1]}
layers:
  - {name: table, op: embedding_bag, num_embeddings: 500, embedding_dim: 16, mode: sum, device: cpu}
  - {name: fc1, op: linear, in_features: 16, out_features: 64, device: cuda:0}
  - {name: act, op: relu, device: cuda:0}
  - {name: fc2, op: linear, in_features: 64, out_features: 1, device: cuda:0}
loss: {op: mse_loss, input: fc2, target: y}
train:
  batch: 64
  optimizer: {name: adam, lr: 0.01}
)";

std::string scratch(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("tandem-gpu-trace-" + std::to_string(getpid()) + "-" + name)).string();
}

struct Slice {
  double start, stop;
  std::string name;
};

std::map<std::string, std::vector<Slice>> slices_by_track(const std::string& path) {
  std::ifstream in(path);
  REQUIRE(in);
  const json trace = json::parse(in);
  std::map<int, std::string> tracks;
  for (const json& e : trace.at("traceEvents"))
    if (e.at("ph") == "M" && e.at("name") == "thread_name") tracks[e.at("tid").get<int>()] = e.at("args").at("name");
  std::map<std::string, std::vector<Slice>> out;
  for (const json& e : trace.at("traceEvents"))
    if (e.at("ph") == "X") {
      const double ts = e.at("ts").get<double>();
      out[tracks.at(e.at("tid").get<int>())].push_back({ts, ts + e.at("dur").get<double>(), e.at("name")});
    }
  return out;
}

}  // namespace

// Run by the test below in a child process with TANDEM_TRACE set; hidden from plain runs.
TEST_CASE("(child) a split model trains under a trace", "[.cuda_trace_child]") {
  const char* model_path = std::getenv("TANDEM_TRACE_TEST_MODEL");
  REQUIRE(model_path != nullptr);
  auto devices = std::make_shared<DeviceRegistry>(DeviceOptions{.sim_gpus = 0, .sim_gpu_memory = std::nullopt, .logical_gpus = 1});
  Model model = Model::load(model_path);
  model.init_parameters(7);
  model.use_devices(devices, PlacementPolicy{});
  TrainingSpec spec = *model.graph().training;
  Trainer trainer(model, spec);
  trainer.set_total_steps(kSteps);
  const Bindings b{{"batch", 64}};
  for (int k = 0; k < kSteps; ++k) {
    TensorMap batch = model.random_inputs(b, 100 + static_cast<uint64_t>(k));
    for (auto& [name, t] : model.random_targets(b, 200 + static_cast<uint64_t>(k))) batch.emplace(name, t);
    trainer.step(batch);
  }
}

TEST_CASE("CUDA lanes appear in a trace: spans timed by CUDA events, in order, inside their steps",
          "[runtime][gpu_runtime][trace]") {
  const std::string model_path = scratch("model.yaml"), trace_path = scratch("trace.json");
  std::ofstream(model_path) << kSplitModel;
  std::vector<std::string> env_text;
  for (char** e = environ; *e; ++e) {
    const std::string v = *e;
    if (!v.starts_with("TANDEM_TRACE=") && !v.starts_with("TANDEM_SIM_TRACE=")) env_text.push_back(v);
  }
  env_text.push_back("TANDEM_TRACE=" + trace_path);
  env_text.push_back("TANDEM_TRACE_TEST_MODEL=" + model_path);
  std::vector<char*> env;
  for (std::string& v : env_text) env.push_back(v.data());
  env.push_back(nullptr);
  std::string self = std::filesystem::read_symlink("/proc/self/exe").string(), filter = "[.cuda_trace_child]";
  std::vector<char*> argv{self.data(), filter.data(), nullptr};
  pid_t child = 0;
  REQUIRE(posix_spawn(&child, self.c_str(), nullptr, nullptr, argv.data(), env.data()) == 0);
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);

  const auto slices = slices_by_track(trace_path);
  REQUIRE(slices.count("host") == 1);
  REQUIRE(slices.count("cuda:0 compute") == 1);
  REQUIRE(slices.count("cuda:0 copies in") == 1);  // the table's activations went up each step
  const std::vector<Slice>& compute = slices.at("cuda:0 compute");

  // the layers' kernels, forward and backward, every step
  for (const char* name : {"layer 'fc1' (linear) forward", "layer 'fc1' (linear) backward"}) {
    INFO(name);
    CHECK(std::count_if(compute.begin(), compute.end(), [&](const Slice& s) { return s.name == name; }) == kSteps);
  }
  // a stream runs its work in order: on each track a span starts after the one before it
  // ended, or lies inside it (a helper enqueued from within submitted work); none has a
  // negative length
  for (const auto& [track, unsorted] : slices) {
    if (!track.starts_with("cuda:0")) continue;
    INFO(track);
    std::vector<Slice> spans = unsorted;
    std::sort(spans.begin(), spans.end(),
              [](const Slice& a, const Slice& b) { return a.start != b.start ? a.start < b.start : a.stop > b.stop; });
    constexpr double rounding_us = 0.01;
    std::vector<double> open;  // ends of the spans enclosing the current one
    for (const Slice& s : spans) {
      INFO(s.name << " from " << s.start << " to " << s.stop << " us");
      CHECK(s.stop >= s.start);
      while (!open.empty() && s.start >= open.back() - rounding_us) open.pop_back();
      if (!open.empty()) CHECK(s.stop <= open.back() + rounding_us);  // nested, never half over
      open.push_back(s.stop);
    }
  }
  // inside their steps: a step runs from its "gradients zeroed" on the host to the next
  // one's (the last to the end of the trace's host spans); each kernel of a layer lies in
  // one step, allowing the reference's wake-up (stream_spans.h) as slack
  std::vector<double> step_starts;
  double host_end = 0;
  for (const Slice& s : slices.at("host")) {
    if (s.name == "gradients zeroed") step_starts.push_back(s.start);
    host_end = std::max(host_end, s.stop);
  }
  REQUIRE(static_cast<int>(step_starts.size()) == kSteps);
  std::sort(step_starts.begin(), step_starts.end());
  step_starts.push_back(host_end);
  constexpr double slack_us = 200;
  int layer_kernels = 0;
  std::vector<int> per_step(kSteps, 0);
  for (const Slice& s : compute) {
    if (!s.name.starts_with("layer ")) continue;
    ++layer_kernels;
    auto after = std::upper_bound(step_starts.begin(), step_starts.end(), s.start + slack_us);
    REQUIRE(after != step_starts.begin());
    const size_t step = static_cast<size_t>(after - step_starts.begin()) - 1;
    INFO(s.name << " from " << s.start << " to " << s.stop << " us");
    REQUIRE(step < static_cast<size_t>(kSteps));
    CHECK(s.start >= step_starts[step] - slack_us);
    CHECK(s.stop <= step_starts[step + 1] + slack_us);
    ++per_step[step];
  }
  CHECK(layer_kernels >= 4 * kSteps);
  for (int k = 0; k < kSteps; ++k) CHECK(per_step[static_cast<size_t>(k)] >= 4);  // fc1, fc2 forward and backward
  std::remove(model_path.c_str());
  std::remove(trace_path.c_str());
}
