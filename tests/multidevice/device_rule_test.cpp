// One rule for `device:`: layers run where the plan says, for `run`, `train`, `plan`,
// `--report` and the C++ API alike. A model that names a GPU this machine lacks is refused
// up front, naming the layer and the device and offering simulated GPUs or the cpu; and a
// GPU whose backend cannot run a layer gets it planned on the cpu, with the backend's reason.
#include <catch2/catch.hpp>

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>

#include "../support/scoped_env.h"
#include "multidevice_support.h"
#include "sim_gpu_stand_in.h"

using namespace tandem;
using namespace tandem::testing;

namespace {

std::string config(const std::string& name) { return std::string(TANDEM_SOURCE_DIR) + "/configs/" + name; }

struct Result {
  int code;
  std::string output;
};

// The CLI with the simulated-GPU variables cleared.
Result run_cli(const std::string& args) {
  FILE* pipe = popen(("env -u TANDEM_SIM_GPUS -u TANDEM_SIM_GPU_MEMORY " + std::string(TANDEM_CLI) + " " + args +
                      " 2>&1")
                         .c_str(),
                     "r");
  REQUIRE(pipe != nullptr);
  std::string out;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, pipe)) out.append(buf, n);
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}


bool gpus_here() { return !cuda_devices().empty(); }

/// A GPU of a backend that cannot run one op: a simulated GPU whose cannot_run refuses
/// `refused`, as the CUDA backend refuses what cuDNN cannot do.
class PickyGpu final : public SimGpuStandIn {
 public:
  PickyGpu(int index, std::string refused) : SimGpuStandIn(index), refused_(std::move(refused)) {}
  KernelChoice make_kernel(const KernelSpec& spec) override {
    if (!cannot_run(spec).empty()) return {nullptr, cannot_run(spec)};
    return SimGpuStandIn::make_kernel(spec);
  }
  std::string cannot_run(const KernelSpec& spec) const override {
    return spec.op == refused_ ? "this GPU has no " + refused_ + " kernel" : "";
  }

 private:
  std::string refused_;
};


}  // namespace

TEST_CASE("a model that names a GPU this machine lacks is refused up front, on every path", "[multidevice][devices]") {
  if (gpus_here()) {
    WARN("this machine has a GPU: the refusals below need one without");
    return;
  }
  // why there is none: a CUDA build finds no driver here, a build without CUDA says so
  const std::string no_gpu_reason =
      run_cli("devices").output.find("built without CUDA") != std::string::npos
          ? "Tandem was built without CUDA (TANDEM_CUDA=OFF or no toolkit)"
          : "no NVIDIA driver was found";
  for (const std::string& command : {std::string("run ") + config("seed_mixed.yaml"),
                                     std::string("run ") + config("seed_mixed.yaml") + " --report",
                                     std::string("plan ") + config("seed_mixed.yaml")}) {
    INFO(command);
    Result r = run_cli(command);
    CHECK(r.code == 2);
    CHECK_THAT(r.output, Catch::Contains("seed_mixed.yaml:8:5: layer 'rnn' is placed on cuda:0") &&
                             Catch::Contains("this machine has no GPU (" + no_gpu_reason + ")") &&
                             Catch::Contains("--sim-gpus 1") && Catch::Contains("--place '*=cpu'"));
  }
  // train: before the data loads (this file does not exist), and with the GPUs the model
  // needs in all (char_gru's block is data_parallel over two)
  Result train = run_cli("train " + config("char_gru.yaml") + " --data /nonexistent/chars.safetensors");
  CHECK(train.code == 2);
  CHECK_THAT(train.output, Catch::Contains("data_parallel block 'rnn'") &&
                               Catch::Contains("--sim-gpus 2, or on the cpu with --place '*=cpu'"));
  CHECK_THAT(train.output, !Catch::Contains("nonexistent"));

  // both ways out work
  Result sim = run_cli("run " + config("seed_mixed.yaml") + " --sim-gpus 1 --json");
  CHECK(sim.code == 0);
  Result cpu = run_cli("run " + config("seed_mixed.yaml") + " --place '*=cpu' --json");
  CHECK(cpu.code == 0);
  // the same outputs (seeded weights and inputs), wherever the GRU ran
  auto values = [](const std::string& json) { return json.substr(json.find("\"outputs\"")); };
  CHECK(values(sim.output).substr(0, 200) == values(cpu.output).substr(0, 200));

  // tandem devices says plainly why there is no GPU
  Result devices = run_cli("devices");
  CHECK_THAT(devices.output, Catch::Contains(no_gpu_reason));
  CHECK_THAT(devices.output, !Catch::Contains("insufficient"));
}

TEST_CASE("the C++ API follows the same rule: refused, to(cpu), use_devices, TANDEM_SIM_GPUS", "[multidevice][devices]") {
  ScopedEnv no_sims("TANDEM_SIM_GPUS", nullptr);
  Model reference = Model::load(config("seed_mixed.yaml"));
  reference.to(Device::cpu());
  reference.init_parameters(3);
  const TensorMap inputs = reference.random_inputs({{"batch", 5}}, 4);
  const TensorMap expected = reference.forward(inputs);
  CHECK_FALSE(reference.placed());
  CHECK(reference.plan().steps.size() == 2);
  CHECK_THAT(reference.plan().steps[1].reason, Catch::Contains("declared cuda:0; every layer on the cpu"));

  if (!gpus_here()) {
    Model model = Model::load(config("seed_mixed.yaml"));
    model.init_parameters(3);
    CHECK_THROWS_WITH(model.forward(inputs), Catch::Contains("layer 'rnn' is placed on cuda:0") &&
                                                 Catch::Contains("--sim-gpus 1") && Catch::Contains("--place '*=cpu'"));
    CHECK_THROWS_AS(model.plan_for({{"batch", 5}}), UserError);
  }
  {  // simulated GPUs from the environment: placed as the file says, at the first pass
    ScopedEnv sims("TANDEM_SIM_GPUS", "1");
    Model model = Model::load(config("seed_mixed.yaml"));
    model.init_parameters(3);
    CHECK(max_relative_error(model.forward(inputs), expected) < 1e-5);
    REQUIRE(model.placed());
    const Plan& plan = model.last_plan();
    const Graph& g = executed_graph(plan, model.graph());
    for (const OpStep& s : plan.steps)
      CHECK(s.device == (g.nodes[s.node].path == "rnn" ? Device::cuda(0) : Device::cpu()));
  }
  {  // explicitly, and to() a GPU puts every layer there
    Model model = Model::load(config("seed_mixed.yaml"));
    model.init_parameters(3);
    model.use_devices(sim_gpus(1), policy());
    CHECK(max_relative_error(model.forward(inputs), expected) < 1e-5);
    ScopedEnv sims("TANDEM_SIM_GPUS", "1");
    model.to(Device::cuda(0));
    CHECK(max_relative_error(model.forward(inputs), expected) < 1e-5);
    for (const OpStep& s : model.last_plan().steps) CHECK(s.device == Device::cuda(0));
  }
}

TEST_CASE("placement asks each GPU's backend what it cannot run, and plans that layer on the cpu", "[multidevice][devices]") {
  ScopedEnv no_sims("TANDEM_SIM_GPUS", nullptr);
  auto registry = std::make_shared<DeviceRegistry>(DeviceOptions{.sim_gpus = 0, .sim_gpu_memory = std::nullopt}, std::vector<CudaDeviceInfo>{fake_gpu(0)},
                                                   std::string(), [](const CudaGpuSpec& gpu) -> std::unique_ptr<Backend> {
                                                     return std::make_unique<PickyGpu>(gpu.logical, "embedding_bag");
                                                   });
  Model reference = Model::load(config("recommender.yaml"));
  reference.to(Device::cpu());
  reference.init_parameters(5);
  const Bindings b{{"batch", 6}, {"tags", 11}};
  const TensorMap inputs = reference.random_inputs(b, 6);
  const TensorMap expected = reference.forward(inputs);

  Model model = Model::load(config("recommender.yaml"));
  model.init_parameters(5);
  model.use_devices(registry, policy("balanced"));
  CHECK(max_relative_error(model.forward(inputs), expected) < 1e-5);
  const Plan& plan = model.last_plan();
  const Graph& g = executed_graph(plan, model.graph());
  int on_gpu = 0, refused = 0;
  for (const OpStep& s : plan.steps) {
    const Node& n = g.nodes[s.node];
    INFO(n.path << " on " << s.device.str() << ": " << s.reason);
    if (n.op == "embedding_bag") {
      CHECK(s.device == Device::cpu());
      CHECK_THAT(s.reason, Catch::Contains("cuda:0 cannot run it (this GPU has no embedding_bag kernel) -> cpu"));
      ++refused;
    } else if (s.device == Device::cuda(0)) {
      ++on_gpu;
    }
  }
  CHECK(refused > 0);
  CHECK(on_gpu > 0);  // the rest went to the GPU as the policy asked
}
