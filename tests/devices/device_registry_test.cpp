// The device registry: simulated GPUs from options and TANDEM_SIM_GPUS, bad values, real
// GPUs, unknown devices; `tandem devices`; the TANDEM_SIM_TRACE timeline.
#include <catch2/catch.hpp>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <sys/wait.h>
#include <unistd.h>

#include "core/error.h"
#include "../support/scoped_env.h"
#include "runtime/devices/device_registry.h"

using namespace tandem;
using tandem::testing::ScopedEnv;

namespace {

constexpr size_t GiB = size_t{1} << 30;


struct Result {
  int code;
  std::string output;
};

// Runs the CLI with `args`, the simulated-GPU variables cleared and `env` (NAME=VALUE ...) set.
Result run_cli_with(const std::string& env, const std::string& args) {
  std::string cmd = "env -u TANDEM_SIM_GPUS -u TANDEM_SIM_GPU_MEMORY -u TANDEM_SIM_TRACE -u TANDEM_TRACE " + env + " " +
                    std::string(TANDEM_CLI) + " " + args + " 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::string out;
  std::array<char, 4096> buf;
  while (size_t n = fread(buf.data(), 1, buf.size(), pipe)) out.append(buf.data(), n);
  int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

Result run_cli(const std::string& args) { return run_cli_with("", args); }

CudaDeviceInfo fake_gpu(int index) { return {index, "NVIDIA H100", 80 * GiB, 79 * GiB, 9, 0}; }

}  // namespace

TEST_CASE("simulated GPUs come from the options: cpu first, then cuda:0..N-1", "[registry]") {
  ScopedEnv env("TANDEM_SIM_GPUS", nullptr);
  DeviceRegistry registry({.sim_gpus = 2, .sim_gpu_memory = 2 * GiB}, {});
  const auto& devices = registry.inventory().devices;
  REQUIRE(devices.size() == 3);
  CHECK(devices[0].device == Device::cpu());
  CHECK_FALSE(devices[0].simulated);
  CHECK(devices[0].memory_bytes > 0);
  CHECK(devices[1].device == Device::cuda(0));
  CHECK(devices[2].device == Device::cuda(1));
  CHECK(devices[2].simulated);
  CHECK(devices[2].memory_bytes == 2 * GiB);
  CHECK(registry.backend(Device::cuda(1)).device() == Device::cuda(1));
  CHECK(&registry.allocator(Device::cuda(1)) == &registry.backend(Device::cuda(1)).allocator());
  CHECK(&registry.allocator(Device::cpu()) == &cpu_allocator());
  CHECK(registry.allocator(Device::cuda(0)).device() == Device::cuda(0));
}

TEST_CASE("a device that does not exist is a user error that lists those that do", "[registry]") {
  DeviceRegistry registry({.sim_gpus = 2, .sim_gpu_memory = GiB}, {});
  CHECK_THROWS_AS(registry.require(Device::cuda(3)), UserError);
  CHECK_THROWS_WITH(registry.allocator(Device::cuda(3)),
                    "device cuda:3 does not exist: this machine has cpu, cuda:0 (simulated), cuda:1 (simulated); "
                    "use --sim-gpus N for more");
  CHECK(registry.backend(Device::cpu()).device() == Device::cpu());
}

TEST_CASE("TANDEM_SIM_GPUS and TANDEM_SIM_GPU_MEMORY give the simulated GPUs", "[registry]") {
  ScopedEnv gpus("TANDEM_SIM_GPUS", "3");
  ScopedEnv memory("TANDEM_SIM_GPU_MEMORY", "512MiB");
  DeviceRegistry registry({}, {});
  CHECK(registry.sim_gpu_count() == 3);
  CHECK(registry.inventory().find(Device::cuda(2))->memory_bytes == (size_t{512} << 20));
  // An option wins over the environment.
  DeviceRegistry one({.sim_gpus = 1, .sim_gpu_memory = std::nullopt}, {});
  CHECK(one.sim_gpu_count() == 1);
  DeviceRegistry none({.sim_gpus = 0, .sim_gpu_memory = std::nullopt}, {});
  CHECK(none.inventory().devices.size() == 1);
}

TEST_CASE("without options or environment there are no simulated GPUs and 16 GiB is the default", "[registry]") {
  ScopedEnv gpus("TANDEM_SIM_GPUS", nullptr);
  ScopedEnv memory("TANDEM_SIM_GPU_MEMORY", nullptr);
  DeviceRegistry registry({}, {}, "no CUDA driver");
  CHECK(registry.sim_gpu_count() == 0);
  CHECK(registry.inventory().devices.size() == 1);
  CHECK(registry.sim_gpu_memory() == 16 * GiB);
  CHECK(registry.why_no_gpus() == "no CUDA driver");
  ScopedEnv empty("TANDEM_SIM_GPUS", "");
  CHECK(DeviceRegistry({}, {}).sim_gpu_count() == 0);
}

TEST_CASE("bad simulated GPU settings are user errors that say what to write", "[registry]") {
  for (const char* bad : {"two", "-1", "2.5", "99999", "3x"}) {
    INFO(bad);
    ScopedEnv gpus("TANDEM_SIM_GPUS", bad);
    CHECK_THROWS_AS(DeviceRegistry({}, {}), UserError);
    CHECK_THROWS_WITH(DeviceRegistry({}, {}), Catch::Contains("TANDEM_SIM_GPUS='" + std::string(bad) + "'") &&
                                                  Catch::Contains("TANDEM_SIM_GPUS=2"));
  }
  {
    ScopedEnv memory("TANDEM_SIM_GPU_MEMORY", "lots");
    CHECK_THROWS_WITH(DeviceRegistry({.sim_gpus = 1, .sim_gpu_memory = std::nullopt}, {}), Catch::StartsWith("TANDEM_SIM_GPU_MEMORY: memory size 'lots'"));
  }
  CHECK_THROWS_AS(DeviceRegistry({.sim_gpus = 1, .sim_gpu_memory = 0}, {}), UserError);
  CHECK_THROWS_AS(DeviceRegistry({.sim_gpus = -2, .sim_gpu_memory = std::nullopt}, {}), UserError);
}

TEST_CASE("real GPUs are cuda:N unless simulated ones are asked for", "[registry]") {
  ScopedEnv gpus("TANDEM_SIM_GPUS", nullptr);
  DeviceRegistry real({}, {fake_gpu(0)});
  REQUIRE(real.inventory().devices.size() == 2);
  CHECK(real.inventory().devices[1].name == "NVIDIA H100");
  CHECK_FALSE(real.simulated(Device::cuda(0)));
  CHECK(real.hidden_real_gpus() == 0);
  CHECK_THROWS_WITH(real.allocator(Device::cuda(1)), Catch::Contains("cpu, cuda:0 (NVIDIA H100)"));

  // A real GPU's backend is opened when first asked for, by the opener the registry was given.
  int opened = 0;
  DeviceRegistry lazy({}, {fake_gpu(0)}, {}, [&](const CudaGpuSpec& gpu) -> std::unique_ptr<Backend> {
    ++opened;
    throw UserError("no CUDA driver");
  });
  CHECK(opened == 0);
  CHECK_THROWS_WITH(lazy.backend(Device::cuda(0)), "cuda:0 (NVIDIA H100) could not be opened: no CUDA driver");
  CHECK(opened == 1);

  DeviceRegistry sims({.sim_gpus = 2, .sim_gpu_memory = GiB}, {fake_gpu(0)});
  CHECK(sims.hidden_real_gpus() == 1);
  CHECK(sims.real_gpus().empty());
  CHECK(sims.simulated(Device::cuda(0)));
  CHECK(sims.simulated(Device::cuda(1)));
}

TEST_CASE("logical GPUs share the real ones: cuda:k on GPU k % count, each with its share of the memory", "[registry]") {
  ScopedEnv gpus("TANDEM_SIM_GPUS", nullptr);
  std::vector<CudaGpuSpec> opened;
  DeviceRegistry registry({.sim_gpus = 0, .sim_gpu_memory = std::nullopt, .logical_gpus = 3}, {fake_gpu(0), fake_gpu(1)}, {},
                          [&](const CudaGpuSpec& spec) -> std::unique_ptr<Backend> {
                            opened.push_back(spec);
                            throw UserError("not here");
                          });
  const auto& devices = registry.inventory().devices;
  REQUIRE(devices.size() == 4);
  CHECK(devices[1].name == "NVIDIA H100 (1/2 of GPU 0)");
  CHECK(devices[1].memory_bytes == 40 * GiB);
  CHECK(devices[2].name == "NVIDIA H100");  // GPU 1 has cuda:1 alone
  CHECK(devices[2].memory_bytes == 80 * GiB);
  CHECK(devices[3].name == "NVIDIA H100 (1/2 of GPU 0)");
  CHECK(registry.physical_gpu(2) == 0);
  CHECK_THROWS_WITH(registry.backend(Device::cuda(2)), Catch::Contains("could not be opened: not here"));
  REQUIRE(opened.size() == 1);
  CHECK(opened[0].logical == 2);
  CHECK(opened[0].gpu.index == 0);
  CHECK(opened[0].physical_of_logical == std::vector<int>{0, 1, 0});
  CHECK(opened[0].capacity == 40 * GiB);
  CHECK_THROWS_AS(DeviceRegistry({.sim_gpus = 0, .sim_gpu_memory = std::nullopt, .logical_gpus = -5}, {fake_gpu(0)}), UserError);
  ScopedEnv logical("TANDEM_LOGICAL_GPUS", "four");
  CHECK_THROWS_WITH(DeviceRegistry({}, {fake_gpu(0)}), Catch::StartsWith("TANDEM_LOGICAL_GPUS='four' is not a number of logical GPUs"));
}

TEST_CASE("a real GPU opens through the CUDA backend's module, or says plainly why not", "[registry]") {
  ScopedEnv gpus("TANDEM_SIM_GPUS", nullptr);
  std::string why;
  const std::vector<CudaDeviceInfo> present = cuda_devices(&why);
  DeviceRegistry registry({}, {present.empty() ? fake_gpu(0) : present[0]});
  if (!present.empty()) {  // a GPU machine: the module loads and the GPU opens
    Backend& gpu = registry.backend(Device::cuda(0));
    CHECK(gpu.device() == Device::cuda(0));
    CHECK(gpu.allocator().device() == Device::cuda(0));
    return;
  }
  // No GPU here: the module (when this build has one) loads, and the error of opening the
  // GPU crosses from it as the UserError it is, naming the device.
  INFO(why);
  CHECK_THROWS_AS(registry.backend(Device::cuda(0)), UserError);
  CHECK_THROWS_WITH(registry.backend(Device::cuda(0)), Catch::StartsWith("cuda:0 (NVIDIA H100) could not be opened: "));
  try {
    registry.backend(Device::cuda(0));
  } catch (const UserError& e) {
    const std::string message = e.what();
    CHECK((message.find("driver") != std::string::npos || message.find("no CUDA backend") != std::string::npos));
    CHECK(message.find("cannot load its CUDA backend") == std::string::npos);  // the module itself loaded
  }
}

TEST_CASE("tandem devices lists simulated GPUs with their memory", "[registry][cli]") {
  Result r = run_cli("devices --sim-gpus 2 --sim-gpu-memory 2GiB --json");
  REQUIRE(r.code == 0);
  auto j = nlohmann::json::parse(r.output);
  REQUIRE(j["devices"].size() == 3);
  CHECK(j["devices"][0]["device"] == "cpu");
  CHECK(j["devices"][0]["simulated"] == false);
  CHECK(j["devices"][1]["device"] == "cuda:0");
  CHECK(j["devices"][2]["device"] == "cuda:1");
  CHECK(j["devices"][2]["simulated"] == true);
  CHECK(j["devices"][2]["memory_bytes"] == 2 * GiB);
  CHECK(j["sim_gpus"] == 2);

  Result table = run_cli("devices --sim-gpus 1 --sim-gpu-memory 1.5GiB");
  CHECK(table.code == 0);
  CHECK_THAT(table.output, Catch::Contains("cuda:0") && Catch::Contains("simulated GPU") && Catch::Contains("1.5 GiB"));
}

TEST_CASE("tandem devices exits 2 for a bad memory size or GPU count", "[registry][cli]") {
  Result r = run_cli("devices --sim-gpus 2 --sim-gpu-memory lots");
  CHECK(r.code == 2);
  CHECK_THAT(r.output, Catch::Contains("--sim-gpu-memory") && Catch::Contains("'lots'") && Catch::Contains("e.g. 16GiB"));
  CHECK(run_cli("devices --sim-gpus many").code == 2);
  CHECK(run_cli("devices --sim-gpus -3").code == 2);
  Result env = run_cli("devices");  // TANDEM_SIM_GPUS is cleared by run_cli
  CHECK(env.code == 0);
}

TEST_CASE("TANDEM_SIM_TRACE writes each simulated queue's tasks, replicas side by side", "[registry][cli][trace]") {
  const std::string path = "/tmp/tandem_trace_test_" + std::to_string(::getpid()) + ".json";
  std::remove(path.c_str());
  Result r = run_cli("run " + std::string(TANDEM_SOURCE_DIR) + "/configs/seed_nested_dp.yaml --sim-gpus 2 --batch 64 --repeat 20");
  REQUIRE(r.code == 0);  // no trace asked for: nothing written
  std::FILE* absent = std::fopen(path.c_str(), "r");
  CHECK(absent == nullptr);
  if (absent) std::fclose(absent);
  r = run_cli_with("TANDEM_SIM_TRACE=" + path + " OMP_NUM_THREADS=2",
                   "run " + std::string(TANDEM_SOURCE_DIR) + "/configs/seed_nested_dp.yaml --sim-gpus 2 --batch 64 --repeat 20");
  REQUIRE(r.code == 0);
  std::ifstream in(path);
  REQUIRE(in);
  nlohmann::json trace = nlohmann::json::parse(in);
  std::set<std::string> tracks;
  int slices = 0, side_by_side = 0;
  for (const auto& e : trace.at("traceEvents")) {
    if (e.at("ph") == "M") tracks.insert(e.at("args").at("name").get<std::string>());
    if (e.at("ph") != "X") continue;
    ++slices;
    CHECK(e.at("dur").get<double>() >= 0.0);
    if (e.contains("args") && e.at("args").value("side_by_side", 1) == 2) ++side_by_side;
  }
  CHECK(tracks.count("cpu") == 1);
  CHECK(tracks.count("cuda:0") == 1);
  CHECK(tracks.count("cuda:1") == 1);
  CHECK(slices >= 20 * 4);   // per forward: block1, block2's two replicas, the gather, block3
  CHECK(side_by_side >= 2);  // block2.fc's replicas ran together at least once
  std::remove(path.c_str());
}

TEST_CASE("a traced training step names each task and shows the host's optimizer step", "[registry][cli][trace]") {
  const std::string path = "/tmp/tandem_trace_train_test_" + std::to_string(::getpid()) + ".json";
  std::remove(path.c_str());
  Result r = run_cli_with("TANDEM_SIM_TRACE=" + path + " OMP_NUM_THREADS=2",
                          "train " + std::string(TANDEM_SOURCE_DIR) +
                              "/configs/dp_classifier.yaml --sim-gpus 4 --batch 16 --bench-steps 2");
  REQUIRE(r.code == 0);
  std::ifstream in(path);
  REQUIRE(in);
  nlohmann::json trace = nlohmann::json::parse(in);
  std::map<int, std::string> tracks;
  std::map<std::string, int> by_name;  // "track: name" -> slices
  for (const auto& e : trace.at("traceEvents"))
    if (e.at("ph") == "M" && e.at("name") == "thread_name") tracks[e.at("tid").get<int>()] = e.at("args").at("name").get<std::string>();
  for (const auto& e : trace.at("traceEvents"))
    if (e.at("ph") == "X") ++by_name[tracks.at(e.at("tid").get<int>()) + ": " + e.at("name").get<std::string>()];
  INFO(trace.dump().substr(0, 4000));
  const int steps = 3 + 2;  // warm-up steps, then the timed ones
  // a replica's kernels, forward and backward, on its own GPU
  CHECK(by_name["cuda:1: layer 'net.hidden@1' (linear) forward"] == steps);
  CHECK(by_name["cuda:1: layer 'net.hidden@1' (linear) backward"] == steps);
  // the replicas hold the weights (Note [where a master lives]): each replica's gradient
  // is all-reduced among the GPUs, and every replica runs the optimizer's step; no weight
  // goes up after the first step, no gradient comes down
  CHECK(by_name["cuda:0: net.hidden.weight gradients all-reduced"] == steps);
  CHECK(by_name["cuda:0: net.hidden.weight optimizer step"] == steps);
  CHECK(by_name["cuda:1: net.hidden.weight optimizer step"] == steps);
  CHECK(by_name["cuda:1: net.hidden.weight upload"] <= 1);
  CHECK(by_name.count("cuda:1 copies: net.hidden.weight gradient to the host") == 0);
  // and what the host did meanwhile
  CHECK(by_name["host: optimizer step"] == steps);
  CHECK(by_name["host: waiting for the devices"] >= steps);
  CHECK(by_name.count("cuda:0: task") == 0);  // every GPU task is named
  std::remove(path.c_str());
}

TEST_CASE("a TANDEM_SIM_TRACE that cannot be written is refused at once with exit code 2", "[registry][cli][trace]") {
  Result r = run_cli_with("TANDEM_SIM_TRACE=/nonexistent-dir/trace.json",
                          "run " + std::string(TANDEM_SOURCE_DIR) + "/configs/seed_nested_dp.yaml --sim-gpus 2 --batch 8");
  CHECK(r.code == 2);
  CHECK_THAT(r.output, Catch::Contains("TANDEM_SIM_TRACE='/nonexistent-dir/trace.json'") &&
                           Catch::Contains("cannot write"));
}
