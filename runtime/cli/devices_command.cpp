// tandem devices: what this machine offers Tandem: the cpu, real GPUs, simulated GPUs.
#include <fmt/core.h>

#include <nlohmann/json.hpp>
#include <optional>

#include "core/error.h"
#include "core/memory_size.h"
#include "runtime/cli/commands.h"
#include "runtime/devices/device_registry.h"
#include "runtime/threads.h"

namespace tandem::cli {
namespace {

struct DevicesOptions {
  std::optional<int> sim_gpus;
  std::optional<int> logical_gpus;
  std::string sim_gpu_memory;
  bool json = false;
};

DeviceOptions device_options(const DevicesOptions& o) {
  DeviceOptions options;
  if (o.sim_gpus) options.sim_gpus = *o.sim_gpus;
  if (o.logical_gpus) options.logical_gpus = *o.logical_gpus;
  if (!o.sim_gpu_memory.empty()) set_sim_gpu_memory(options, o.sim_gpu_memory, "--sim-gpu-memory");
  return options;
}

std::string hidden_note(const DeviceRegistry& registry) {
  int n = registry.hidden_real_gpus();
  return fmt::format("{} real GPU{} set aside: simulated GPUs were asked for (--sim-gpus / TANDEM_SIM_GPUS)", n,
                     n == 1 ? "" : "s");
}

int print_json(const DeviceRegistry& registry) {
  int threads = compute_threads();
  nlohmann::json j;
  j["devices"] = nlohmann::json::array();
  for (const DeviceInfo& d : registry.inventory().devices) {
    nlohmann::json entry{{"device", d.device.str()}, {"name", d.name}, {"memory_bytes", d.memory_bytes},
                         {"simulated", d.simulated}};
    if (d.device.kind == DeviceKind::cpu) {
      entry["threads"] = threads;
      entry["threads_chosen_by"] = compute_threads_reason();
      entry["usable_cores"] = usable_cores();
      entry["thread_wait_policy"] = thread_wait_policy();
    }
    if (d.device.kind == DeviceKind::cuda && !d.simulated) {
      const CudaDeviceInfo& g = registry.real_gpus().at(static_cast<size_t>(registry.physical_gpu(d.device.index)));
      entry["free_bytes"] = g.free_bytes;
      entry["compute_capability"] = std::to_string(g.compute_major) + "." + std::to_string(g.compute_minor);
    }
    j["devices"].push_back(entry);
  }
  j["cuda_compiled"] = cuda_compiled();
  j["sim_gpus"] = registry.sim_gpu_count();
  j["hidden_real_gpus"] = registry.hidden_real_gpus();
  if (registry.real_gpus().empty() && registry.hidden_real_gpus() == 0) j["no_gpu_reason"] = registry.why_no_gpus();
  fmt::print("{}\n", j.dump(2));
  return 0;
}

int print_table(const DeviceRegistry& registry) {
  fmt::print("{:<8} {:<44} {:>12}  {}\n", "device", "name", "memory", "notes");
  for (const DeviceInfo& d : registry.inventory().devices) {
    std::string notes;
    if (d.device.kind == DeviceKind::cpu)
      notes = fmt::format("{} threads ({}), {}", compute_threads(), compute_threads_reason(),
                          thread_wait_policy());
    if (d.simulated) notes = "simulated: own memory pool and queue, CPU kernels";
    if (d.device.kind == DeviceKind::cuda && !d.simulated) {
      const CudaDeviceInfo& g = registry.real_gpus().at(static_cast<size_t>(registry.physical_gpu(d.device.index)));
      notes = fmt::format("sm_{}{}, {} free", g.compute_major, g.compute_minor, format_bytes(g.free_bytes));
    }
    fmt::print("{:<8} {:<44} {:>12}  {}\n", d.device.str(), d.name, format_bytes(d.memory_bytes), notes);
  }
  if (registry.hidden_real_gpus() > 0)
    fmt::print("{}\n", hidden_note(registry));
  else if (registry.real_gpus().empty() && registry.sim_gpu_count() == 0)
    fmt::print("no GPUs: {}; simulate some with --sim-gpus N (or TANDEM_SIM_GPUS=N)\n", registry.why_no_gpus());
  return 0;
}

}  // namespace

Command add_devices_command(CLI::App& app) {
  auto o = std::make_shared<DevicesOptions>();
  CLI::App* sub = app.add_subcommand("devices", "List the devices Tandem can use, with their memory");
  sub->add_option("--sim-gpus", o->sim_gpus,
                  "simulate N GPUs as cuda:0..N-1 (default: TANDEM_SIM_GPUS, else none); they replace real GPUs");
  sub->add_option("--sim-gpu-memory", o->sim_gpu_memory,
                  "memory of each simulated GPU, e.g. 2GiB, 512MiB, 1.5GB, or one per GPU: 4GiB,2GiB,2GiB (default: TANDEM_SIM_GPU_MEMORY, else 16GiB)");
  sub->add_option("--logical-gpus", o->logical_gpus,
                  "N devices cuda:0..N-1 over the real GPUs in turn, each with its share of the memory");
  sub->add_flag("--json", o->json, "print the result as JSON");
  return [o] {
    DeviceRegistry registry(device_options(*o));
    return o->json ? print_json(registry) : print_table(registry);
  };
}

}  // namespace tandem::cli
