// tandem devices: what this machine offers Tandem.
#include <fmt/core.h>
#include <omp.h>
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "backends/cuda/cuda_devices.h"
#include "runtime/cli/commands.h"

namespace tandem::cli {
namespace {

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.starts_with("model name")) return line.substr(line.find(':') + 2);
  return "unknown cpu";
}

int run_devices(bool json) {
  size_t host_bytes = static_cast<size_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<size_t>(sysconf(_SC_PAGE_SIZE));
  int threads = omp_get_max_threads();
  std::string why_none;
  std::vector<CudaDeviceInfo> gpus = cuda_devices(&why_none);
  if (json) {
    nlohmann::json j;
    j["devices"].push_back({{"device", "cpu"}, {"name", cpu_model_name()}, {"threads", threads}, {"memory_bytes", host_bytes}});
    for (const CudaDeviceInfo& g : gpus)
      j["devices"].push_back({{"device", "cuda:" + std::to_string(g.index)},
                              {"name", g.name},
                              {"memory_bytes", g.total_bytes},
                              {"free_bytes", g.free_bytes},
                              {"compute_capability", std::to_string(g.compute_major) + "." + std::to_string(g.compute_minor)}});
    j["cuda_compiled"] = cuda_compiled();
    if (gpus.empty()) j["no_gpu_reason"] = why_none;
    fmt::print("{}\n", j.dump(2));
    return 0;
  }
  fmt::print("{:<8} {:<44} {:>12}  {}\n", "device", "name", "memory", "notes");
  fmt::print("{:<8} {:<44} {:>9.1f} GiB  {} threads\n", "cpu", cpu_model_name(), host_bytes / double(1 << 30), threads);
  for (const CudaDeviceInfo& g : gpus)
    fmt::print("{:<8} {:<44} {:>9.1f} GiB  sm_{}{}, {:.1f} GiB free\n", "cuda:" + std::to_string(g.index), g.name,
               g.total_bytes / double(1 << 30), g.compute_major, g.compute_minor, g.free_bytes / double(1 << 30));
  if (gpus.empty()) fmt::print("no GPUs: {}\n", why_none);
  return 0;
}

}  // namespace

Command add_devices_command(CLI::App& app) {
  auto json = std::make_shared<bool>(false);
  CLI::App* sub = app.add_subcommand("devices", "List the devices Tandem can use, with their memory");
  sub->add_flag("--json", *json, "print the result as JSON");
  return [json] { return run_devices(*json); };
}

}  // namespace tandem::cli
