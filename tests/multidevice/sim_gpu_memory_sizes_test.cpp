// Simulated GPUs of different sizes (--sim-gpu-memory 4GiB,2GiB,2GiB; issue 30, item 7), and
// chunking: memory following them: a GPU of twice the memory takes twice the rows, and the
// block still computes what the model computes on the cpu.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>

#include "multidevice_support.h"

using namespace tandem;
using namespace tandem::testing;

TEST_CASE("simulated GPUs of different sizes, and chunking: memory in proportion to them", "[multidevice][data_parallel]") {
  DeviceOptions options{.sim_gpus = 3};
  set_sim_gpu_memory(options, "64MiB,32MiB,32MiB", "--sim-gpu-memory");
  auto registry = std::make_shared<DeviceRegistry>(options);
  const DeviceInventory& inventory = registry->inventory();
  REQUIRE(inventory.devices.size() == 4);
  CHECK(inventory.find(Device::cuda(0))->memory_bytes == 64 * MiB);
  CHECK(inventory.find(Device::cuda(1))->memory_bytes == 32 * MiB);
  CHECK(inventory.find(Device::cuda(2))->memory_bytes == 32 * MiB);

  const std::string yaml = (std::filesystem::temp_directory_path() /
                            ("tandem_sim_sizes_" + std::to_string(getpid()) + ".yaml")).string();
  std::ofstream(yaml) << R"(name: by_memory
inputs:
  x: {shape: [batch, 6]}
layers:
  - name: body
    data_parallel: {devices: [cuda:0, cuda:1, cuda:2], output_device: cpu, chunking: memory}
    layers:
      - {name: fc, op: linear, in_features: 6, out_features: 3}
)";
  Model model = Model::load(yaml), reference = Model::load(yaml);
  reference.to(Device::cpu());
  model.init_parameters(6);
  reference.init_parameters(6);
  model.use_devices(registry, policy());
  std::vector<std::string> replicas;
  model.set_forward_hook([&](const LayerCall& call) {
    if (call.node->replica && call.node->replica->kind == ReplicaRole::Kind::replica)
      replicas.push_back(call.device.str() + " " + shape_str(call.output_shape));
  });
  TensorMap in = reference.random_inputs({{"batch", 8}}, 2);
  CHECK(max_relative_error(model.forward(in), reference.forward(in)) <= 1e-6);
  std::sort(replicas.begin(), replicas.end());
  CHECK(replicas == std::vector<std::string>{"cuda:0 [4, 3]", "cuda:1 [2, 3]", "cuda:2 [2, 3]"});

  // the CLI: the devices table, and a list of another length than the GPUs, exit 2
  int code = 0;
  std::string out = run_program(std::string(TANDEM_CLI) + " devices --sim-gpus 3 --sim-gpu-memory 4GiB,2GiB,2GiB", &code);
  CHECK(code == 0);
  CHECK(out.find("4.0 GiB") != std::string::npos);
  CHECK(out.find("2.0 GiB") != std::string::npos);
  out = run_program(std::string(TANDEM_CLI) + " plan " + yaml + " --sim-gpus 2 --sim-gpu-memory 4GiB,2GiB,2GiB", &code);
  CHECK(code == 2);
  CHECK(out.find("--sim-gpu-memory lists 3 sizes, but 2 simulated GPUs were asked for") != std::string::npos);
  out = run_program(std::string(TANDEM_CLI) + " plan " + yaml + " --sim-gpus 3 --sim-gpu-memory 4GiB,lots,2GiB", &code);
  CHECK(code == 2);
  CHECK(out.find("--sim-gpu-memory: ") != std::string::npos);
  CHECK(out.find("(in the list '4GiB,lots,2GiB')") != std::string::npos);
  std::filesystem::remove(yaml);
}
