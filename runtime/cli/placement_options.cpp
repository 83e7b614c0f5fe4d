#include "runtime/cli/placement_options.h"

#include <algorithm>
#include <cstdlib>
#include <optional>

#include "core/error.h"
#include "core/memory_size.h"

namespace tandem::cli {

void add_device_flags(CLI::App& app, PlacementFlags& flags, const std::string& sim_gpus_help) {
  app.add_option("--sim-gpus", flags.sim_gpus, sim_gpus_help)->check(CLI::Range(0, max_sim_gpus));
  app.add_option("--sim-gpu-memory", flags.sim_gpu_memory, "memory of each simulated GPU, with its unit: 4GiB, 512MiB, 1.5GB (default 16GiB); or one per GPU: 4GiB,2GiB,2GiB");
  app.add_option("--logical-gpus", flags.logical_gpus,
                 "N devices cuda:0..N-1 over the real GPUs in turn (a plan for more GPUs than there are)")
      ->check(CLI::Range(0, max_sim_gpus));
}

void add_policy_flags(CLI::App& app, PlacementFlags& flags) {
  app.add_option("--placement", flags.placement, "policy: annotations, embeddings-on-cpu or balanced (overrides placement:)");
  app.add_option("--max-memory", flags.max_memory, "memory budgets, as accelerate's max_memory: a size for every GPU (8GiB) and/or DEVICE=SIZE items, "
                 "the cpu included (cuda:0=6GiB,cpu=20GiB); the balancer fills each GPU up to its budget");
  app.add_option("--place", flags.place, "PATTERN=DEVICE: layers (or blocks) matching the glob go there; later ones win");
}

size_t size_option(const std::string& text, const std::string& flag, bool device_memory) {
  size_t bytes = 0;
  try {
    bytes = device_memory ? parse_device_memory_size(text) : parse_memory_size(text);
  } catch (const UserError& e) {
    throw UserError(flag + ": " + e.what());
  }
  if (bytes == 0) throw UserError(flag + " must be more than 0 bytes");
  return bytes;
}

DeviceOptions device_options(const PlacementFlags& flags) {
  DeviceOptions options;
  options.sim_gpus = flags.sim_gpus;
  options.logical_gpus = flags.logical_gpus;
  if (!flags.sim_gpu_memory.empty()) set_sim_gpu_memory(options, flags.sim_gpu_memory, "--sim-gpu-memory");
  return options;
}

PlacementPolicy placement_policy(const PlacementFlags& flags, const Graph& graph) {
  PlacementPolicy p;
  if (graph.placement) apply_placement_spec(*graph.placement, p);
  if (!flags.placement.empty()) {
    const auto& names = placement_policy_names();
    if (std::find(names.begin(), names.end(), flags.placement) == names.end())
      throw UserError("--placement '" + flags.placement + "' is not a policy; write annotations, embeddings-on-cpu or balanced");
    p.name = flags.placement;
  }
  if (!flags.max_memory.empty()) {
    // the flag's budgets replace the file's, all of them
    p.max_memory.reset();
    p.device_max_memory.clear();
    try {
      parse_max_memory(flags.max_memory, p);
    } catch (const UserError& e) {
      throw UserError("--max-memory " + std::string(e.what()));
    }
  }
  for (const std::string& item : flags.place) {
    size_t eq = item.find('=');
    // one '=': a layer path never holds one, so a second is a typo, not part of the pattern
    std::optional<Device> d = eq == std::string::npos || item.find('=', eq + 1) != std::string::npos
                                  ? std::nullopt
                                  : Device::parse(item.substr(eq + 1));
    if (!d || eq == 0)
      throw UserError("--place '" + item + "' must be PATTERN=DEVICE with one '=', such as 'encoder.*=cuda:1' or "
                      "'emb=cpu'");
    p.place_overrides.emplace_back(item.substr(0, eq), *d);
  }
  return p;
}

bool everything_on_cpu(const PlacementFlags& flags) {
  return !flags.place.empty() && flags.place.back() == "*=cpu" && flags.placement.empty();
}

void apply_placement_flags(Model& model, const PlacementFlags& flags, bool placed) {
  const char* sim_env = std::getenv("TANDEM_SIM_GPUS");
  if (everything_on_cpu(flags)) {
    model.to(Device::cpu());  // one device: no device report to make
    return;
  }
  if (!flags.any_given() && !placed && !(sim_env && *sim_env)) return;
  model.use_devices(std::make_shared<DeviceRegistry>(device_options(flags)), placement_policy(flags, model.graph()));
}

}  // namespace tandem::cli
