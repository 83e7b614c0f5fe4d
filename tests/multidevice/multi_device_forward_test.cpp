// Multi-device inference: a place() plan run over the cpu and simulated GPUs computes what
// the all-cpu run computes, moves exactly the boundary tensors, and names the layer when a
// GPU runs out of memory.
#include <catch2/catch.hpp>

#include <sys/wait.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"
#include "runtime/devices/device_registry.h"
#include "runtime/model.h"

using namespace tandem;

namespace {

constexpr size_t KiB = size_t{1} << 10;
constexpr size_t MiB = size_t{1} << 20;

std::string config(const std::string& name) { return std::string(TANDEM_SOURCE_DIR) + "/configs/" + name; }

std::shared_ptr<DeviceRegistry> sim_gpus(int n, size_t memory = 256 * MiB) {
  return std::make_shared<DeviceRegistry>(DeviceOptions{.sim_gpus = n, .sim_gpu_memory = memory},
                                          std::vector<CudaDeviceInfo>{});
}

PlacementPolicy policy(std::string name = "annotations", std::vector<std::pair<std::string, Device>> place = {}) {
  PlacementPolicy p;
  p.name = std::move(name);
  p.place_overrides = std::move(place);
  return p;
}

float max_difference(const TensorMap& a, const TensorMap& b) {
  REQUIRE(a.size() == b.size());
  float worst = 0;
  for (const auto& [name, t] : a) {
    const Tensor& u = b.at(name);
    REQUIRE(t.shape() == u.shape());
    REQUIRE(u.device() == Device::cpu());
    auto x = t.span<float>();
    auto y = u.span<float>();
    for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::fabs(x[i] - y[i]));
  }
  return worst;
}

const DeviceReport& entry(const std::vector<DeviceReport>& report, Device d) {
  for (const DeviceReport& r : report)
    if (r.device == d) return r;
  FAIL("no report for " + d.str());
  return report.front();
}

struct Traffic {
  size_t in = 0, out = 0;
};

// What the plan's forward copies move into and out of `d`.
Traffic planned(const Plan& plan, Device d) {
  Traffic t;
  for (const CopyStep& c : plan.copies) {
    if (!c.forward) continue;
    if (c.to == d) t.in += c.bytes;
    if (c.from == d) t.out += c.bytes;
  }
  return t;
}

// Every device moved exactly what the plan's copies say: the boundary tensors, nothing else.
void check_traffic_matches_plan(const Model& model) {
  const Plan& plan = model.last_plan();
  for (const DeviceReport& r : model.device_report()) {
    INFO("device " << r.device.str());
    Traffic t = planned(plan, r.device);
    CHECK(r.bytes_in == t.in);
    CHECK(r.bytes_out == t.out);
  }
}

struct Result {
  int code;
  std::string output;
};

Result run_cli(const std::string& args) {
  std::string cmd = "env -u TANDEM_SIM_GPUS -u TANDEM_SIM_GPU_MEMORY " + std::string(TANDEM_CLI) + " " + args + " 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::string out;
  std::array<char, 4096> buf;
  while (size_t n = fread(buf.data(), 1, buf.size(), pipe)) out.append(buf.data(), n);
  int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

}  // namespace

TEST_CASE("the mixed seed model over simulated GPUs gives the all-cpu outputs and copies once each way",
          "[multidevice]") {
  int gpus = GENERATE(2, 4);
  const int64_t batch = 32;
  Model reference = Model::load(config("seed_mixed.yaml"));
  reference.to(Device::cpu());  // the single-device reference
  TensorMap inputs = reference.random_inputs({{"batch", batch}}, 7);
  TensorMap expected = reference.forward(inputs);

  Model model = Model::load(config("seed_mixed.yaml"));
  model.use_devices(sim_gpus(gpus), policy());
  TensorMap got = model.forward(inputs);
  CHECK(max_difference(expected, got) <= 1e-6f);

  const Plan& plan = model.last_plan();
  REQUIRE(plan.steps.size() == 2);
  CHECK(plan.steps[0].device == Device::cpu());
  CHECK(plan.steps[1].device == Device::cuda(0));
  auto report = model.device_report();
  REQUIRE(report.size() == 2);  // the cpu and cuda:0: the other GPUs are not in the plan
  const DeviceReport& cpu = entry(report, Device::cpu());
  const DeviceReport& gpu = entry(report, Device::cuda(0));
  const size_t activation = batch * 10 * 4;
  CHECK(gpu.copies_in == 1);
  CHECK(gpu.bytes_in == activation);
  CHECK(gpu.copies_out == 1);  // the gather of the output
  CHECK(gpu.bytes_out == activation);
  CHECK(cpu.copies_out == 1);
  CHECK(cpu.bytes_out == activation);
  CHECK(cpu.copies_in == 1);
  CHECK(cpu.bytes_in == activation);
  // cuda:0 holds the linear layer's weights for good, and held the copy and its output
  const size_t parameters = (10 * 10 + 10) * 4;
  CHECK(gpu.current_bytes >= parameters);
  CHECK(gpu.current_bytes < parameters + 128);  // rounded to 64-byte size classes
  CHECK(gpu.peak_bytes >= gpu.current_bytes + 2 * activation);
  CHECK(gpu.busy_seconds > 0);
  check_traffic_matches_plan(model);
}

TEST_CASE("the recommender with embeddings on the cpu over 2 GPUs equals the single-device run", "[multidevice]") {
  Model reference = Model::load(config("recommender.yaml"));
  reference.to(Device::cpu());  // the single-device reference
  TensorMap inputs = reference.random_inputs({{"batch", 16}, {"tags", 40}}, 3);
  TensorMap expected = reference.forward(inputs);

  Model model = Model::load(config("recommender.yaml"));
  model.use_devices(sim_gpus(2), policy("embeddings-on-cpu"));
  TensorMap got = model.forward(inputs);
  CHECK(max_difference(expected, got) <= 1e-6f);
  const Plan& plan = model.last_plan();
  bool some_on_gpu = false;
  for (const OpStep& s : plan.steps) {
    const Node& node = model.graph().nodes[s.node];
    if (node.op == "embedding_bag") CHECK(s.device == Device::cpu());
    some_on_gpu |= s.device.kind == DeviceKind::cuda;
  }
  CHECK(some_on_gpu);
  check_traffic_matches_plan(model);
}

TEST_CASE("mlp_4x1024 split by --place patterns equals the single-device run", "[multidevice]") {
  using Overrides = std::vector<std::pair<std::string, Device>>;
  auto [label, overrides] = GENERATE(
      std::make_pair(std::string("hidden.1 on cuda:1"), Overrides{{"hidden.1*", Device::cuda(1)}}),
      std::make_pair(std::string("a pipeline over three GPUs"),
                     Overrides{{"hidden.0*", Device::cuda(0)}, {"hidden.1*", Device::cuda(1)},
                               {"hidden.2*", Device::cuda(2)}, {"head", Device::cuda(0)}}));
  INFO(label);
  Model reference = Model::load(config("mlp_4x1024.yaml"));
  reference.to(Device::cpu());  // the single-device reference
  TensorMap inputs = reference.random_inputs({{"batch", 8}}, 11);
  TensorMap expected = reference.forward(inputs);

  Model model = Model::load(config("mlp_4x1024.yaml"));
  model.use_devices(sim_gpus(3), policy("annotations", overrides));
  TensorMap got = model.forward(inputs);
  CHECK(max_difference(expected, got) <= 1e-6f);
  check_traffic_matches_plan(model);
  // every boundary crosses once: one copy per plan copy, in and out
  int64_t copies_in = 0, copies_out = 0;
  for (const DeviceReport& r : model.device_report()) copies_in += r.copies_in, copies_out += r.copies_out;
  int64_t forward_copies = 0;
  for (const CopyStep& c : model.last_plan().copies) forward_copies += c.forward;
  CHECK(copies_in == forward_copies);
  CHECK(copies_out == forward_copies);
  // a layer's weights are on its device only
  const DeviceReport gpu1 = entry(model.device_report(), Device::cuda(1));  // a copy: the report is a temporary
  const size_t layer = (1024 * 1024 + 1024) * 4;
  CHECK(gpu1.current_bytes >= layer);
  CHECK(gpu1.current_bytes < 2 * layer);
}

TEST_CASE("repeated placed forwards build no new kernels and give the same outputs", "[multidevice]") {
  Model model = Model::load(config("mlp_4x1024.yaml"));
  model.use_devices(sim_gpus(2), policy("balanced"));
  TensorMap inputs = model.random_inputs({{"batch", 4}}, 5);
  TensorMap first = model.forward(inputs);
  int64_t primitives = model.primitives_created();
  for (int i = 0; i < 3; ++i) {
    TensorMap again = model.forward(inputs);
    CHECK(max_difference(first, again) == 0.0f);
  }
  CHECK(model.primitives_created() == primitives);

  // new weights reach the GPUs' copies
  model.init_parameters(42);
  Model reference = Model::load(config("mlp_4x1024.yaml"));
  reference.to(Device::cpu());  // the single-device reference
  reference.init_parameters(42);
  CHECK(max_difference(reference.forward(inputs), model.forward(inputs)) <= 1e-6f);
}

TEST_CASE("a GPU too small at run time throws OutOfMemory naming the layer, and the next run works",
          "[multidevice]") {
  Model model = Model::load(config("seed_mixed.yaml"));
  model.use_devices(sim_gpus(1, 64 * KiB), policy());
  TensorMap big = model.random_inputs({{"batch", 4096}}, 1);  // 160 KiB into cuda:0
  try {
    model.forward(big);
    FAIL("expected OutOfMemory");
  } catch (const OutOfMemory& e) {
    CHECK(e.device == Device::cuda(0));
    CHECK(e.context == "layer 'rnn' (linear)");
    CHECK_THAT(e.what(), Catch::Contains("layer 'rnn' (linear)") && Catch::Contains("cuda:0"));
  }
  Model reference = Model::load(config("seed_mixed.yaml"));
  reference.to(Device::cpu());  // the single-device reference
  TensorMap small = model.random_inputs({{"batch", 8}}, 1);
  CHECK(max_difference(reference.forward(small), model.forward(small)) <= 1e-6f);
  CHECK(entry(model.device_report(), Device::cuda(0)).copies_in == 1);
}

TEST_CASE("parameters that do not fit on their GPU throw OutOfMemory naming the layer when compiling",
          "[multidevice]") {
  Model model = Model::load(config("mlp_4x1024.yaml"));
  // each layer (4 MiB) fits alone; all four do not
  model.use_devices(sim_gpus(1, 10 * MiB), policy("annotations", {{"*", Device::cuda(0)}}));
  TensorMap inputs = model.random_inputs({{"batch", 1}}, 1);
  try {
    model.forward(inputs);
    FAIL("expected OutOfMemory");
  } catch (const OutOfMemory& e) {
    CHECK(e.device == Device::cuda(0));
    CHECK_THAT(e.what(), Catch::Contains("layer 'hidden.2.fc' (linear)"));
  }
}

TEST_CASE("tandem run --sim-gpus --report prints each device and the JSON lists them", "[multidevice][cli]") {
  Result table = run_cli("run " + config("seed_mixed.yaml") + " --sim-gpus 2 --batch 4 --report");
  INFO(table.output);
  REQUIRE(table.code == 0);
  CHECK_THAT(table.output, Catch::Contains("per device") && Catch::Contains("cuda:0"));

  Result json = run_cli("run " + config("seed_mixed.yaml") + " --sim-gpus 2 --batch 4 --json");
  INFO(json.output);
  REQUIRE(json.code == 0);
  nlohmann::json j = nlohmann::json::parse(json.output);
  REQUIRE(j["devices"].size() == 2);
  CHECK(j["devices"][1]["device"] == "cuda:0");
  CHECK(j["devices"][1]["bytes_in"] == 4 * 10 * 4);
  CHECK(j["devices"][1]["copies_in"] == 1);
  CHECK(j["devices"][1]["copies_out"] == 1);

  // the placed run prints what the cpu-only run prints
  Result placed = run_cli("run " + config("mlp_4x1024.yaml") + " --sim-gpus 2 --place 'hidden.1*=cuda:1' --batch 2 --json");
  Result plain = run_cli("run " + config("mlp_4x1024.yaml") + " --batch 2 --json");
  REQUIRE(placed.code == 0);
  REQUIRE(plain.code == 0);
  nlohmann::json a = nlohmann::json::parse(placed.output), b = nlohmann::json::parse(plain.output);
  CHECK(a["outputs"] == b["outputs"]);
  CHECK(a.contains("devices"));
  CHECK_FALSE(b.contains("devices"));
}

TEST_CASE("tandem run exits 2 naming the layer when a simulated GPU is out of memory", "[multidevice][cli]") {
  Result r = run_cli("run " + config("seed_mixed.yaml") + " --sim-gpus 1 --sim-gpu-memory 64KiB --batch 4096");
  INFO(r.output);
  CHECK(r.code == 2);
  CHECK_THAT(r.output, Catch::Contains("layer 'rnn' (linear)") && Catch::Contains("out of memory on cuda:0"));
}
