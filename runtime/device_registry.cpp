#include "runtime/device_registry.h"

#include <unistd.h>

#include <charconv>
#include <cstdlib>
#include <fstream>
#include <string_view>

#include "backends/sim/sim_trace.h"
#include "core/error.h"
#include "core/memory_size.h"

namespace tandem {
namespace {

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.starts_with("model name") && line.find(':') != std::string::npos) {
      std::string name = line.substr(line.find(':') + 1);
      return name.starts_with(' ') ? name.substr(1) : name;
    }
  return "cpu";
}

size_t host_memory_bytes() {
  long pages = sysconf(_SC_PHYS_PAGES);
  long page_size = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page_size > 0 ? static_cast<size_t>(pages) * static_cast<size_t>(page_size) : 0;
}

size_t sim_gpu_memory_from(const DeviceOptions& options) {
  size_t bytes = default_sim_gpu_memory;
  std::string source = "--sim-gpu-memory";
  if (options.sim_gpu_memory) {
    bytes = *options.sim_gpu_memory;
  } else if (const char* env = std::getenv("TANDEM_SIM_GPU_MEMORY"); env != nullptr && *env != '\0') {
    source = "TANDEM_SIM_GPU_MEMORY";
    try {
      bytes = parse_memory_size(env);
    } catch (const UserError& e) {
      throw UserError("TANDEM_SIM_GPU_MEMORY: " + std::string(e.what()));
    }
  }
  if (bytes == 0) throw UserError(source + " is 0: a simulated GPU needs some memory, e.g. 2GiB");
  return bytes;
}

}  // namespace

int sim_gpus_from_environment() {
  const char* env = std::getenv("TANDEM_SIM_GPUS");
  if (env == nullptr) return 0;
  std::string_view text(env);
  while (!text.empty() && text.front() == ' ') text.remove_prefix(1);
  while (!text.empty() && text.back() == ' ') text.remove_suffix(1);
  if (text.empty()) return 0;
  int count = -1;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), count);
  if (ec != std::errc() || end != text.data() + text.size() || count < 0 || count > max_sim_gpus)
    throw UserError("TANDEM_SIM_GPUS='" + std::string(env) + "' is not a number of simulated GPUs: set it to a whole number from 0 to " +
                    std::to_string(max_sim_gpus) + ", e.g. TANDEM_SIM_GPUS=2, or unset it");
  return count;
}

DeviceRegistry::DeviceRegistry(const DeviceOptions& options) {
  std::string why;
  std::vector<CudaDeviceInfo> gpus = cuda_devices(&why);
  why_no_gpus_ = std::move(why);
  build(options, std::move(gpus));
}

DeviceRegistry::DeviceRegistry(const DeviceOptions& options, std::vector<CudaDeviceInfo> real_gpus, std::string why_no_gpus)
    : why_no_gpus_(std::move(why_no_gpus)) {
  build(options, std::move(real_gpus));
}

DeviceRegistry::~DeviceRegistry() {
  // Run every queue dry before any is destroyed: a queued peer copy may write to another.
  for (auto& gpu : sim_gpus_) {
    try {
      gpu->synchronize();
    } catch (...) {
      // An error nobody synchronised for; a destructor has no one to tell.
    }
  }
  try {
    cpu_queue_.synchronize();
  } catch (...) {
  }
}

void DeviceRegistry::build(const DeviceOptions& options, std::vector<CudaDeviceInfo> real_gpus) {
  int sims = options.sim_gpus;
  if (sims < -1 || sims > max_sim_gpus)
    throw UserError("--sim-gpus " + std::to_string(sims) + " is out of range: ask for 0 to " +
                    std::to_string(max_sim_gpus) + " simulated GPUs, e.g. --sim-gpus 2");
  if (sims == -1) sims = sim_gpus_from_environment();
  if (sims > 0) SimTrace::check_environment();
  sim_gpu_memory_ = sim_gpu_memory_from(options);

  inventory_.devices = {DeviceInfo{Device::cpu(), host_memory_bytes(), false, cpu_model_name()}};
  if (sims > 0) {
    hidden_real_gpus_ = static_cast<int>(real_gpus.size());
    for (int i = 0; i < sims; ++i) {
      sim_gpus_.push_back(std::make_unique<SimGpu>(i, sim_gpu_memory_));
      inventory_.devices.push_back(DeviceInfo{Device::cuda(i), sim_gpu_memory_, true, "simulated GPU"});
    }
    return;
  }
  real_gpus_ = std::move(real_gpus);
  for (const CudaDeviceInfo& g : real_gpus_)
    inventory_.devices.push_back(DeviceInfo{Device::cuda(g.index), g.total_bytes, false, g.name});
}

std::string DeviceRegistry::available() const {
  std::string list;
  for (const DeviceInfo& d : inventory_.devices) {
    if (!list.empty()) list += ", ";
    list += d.device.str();
    if (d.simulated) list += " (simulated)";
    else if (d.device.kind == DeviceKind::cuda) list += " (" + d.name + ")";
  }
  return list;
}

void DeviceRegistry::require(Device device) const {
  if (has(device)) return;
  throw UserError("device " + device.str() + " does not exist: this machine has " + available() +
                  "; use --sim-gpus N for more");
}

bool DeviceRegistry::simulated(Device device) const {
  const DeviceInfo* info = inventory_.find(device);
  return info != nullptr && info->simulated;
}

Allocator& DeviceRegistry::allocator(Device device) {
  require(device);
  if (device.kind == DeviceKind::cpu) return cpu_allocator();
  if (simulated(device)) return sim_gpu(device).allocator();
  throw UserError(device.str() + " is a real GPU (" + inventory_.find(device)->name +
                  "), and this build of Tandem cannot allocate on real GPUs yet; use --sim-gpus N to run on simulated GPUs");
}

SimGpu& DeviceRegistry::sim_gpu(Device device) {
  require(device);
  if (!simulated(device))
    throw UserError(device.str() + " is not a simulated GPU: this machine has " + available());
  return *sim_gpus_.at(static_cast<size_t>(device.index));
}

}  // namespace tandem
