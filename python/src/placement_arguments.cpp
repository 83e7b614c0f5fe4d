#include "placement_arguments.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <tuple>

#include "core/memory_size.h"

namespace tandem::python {
namespace {

/// One registry per set of device options, shared by the models placed with them.
using Key = std::tuple<int, size_t, int, std::vector<size_t>>;
std::mutex& registries_mutex() {
  static std::mutex mutex;
  return mutex;
}
std::map<Key, std::weak_ptr<DeviceRegistry>>& registries() {
  static auto* map = new std::map<Key, std::weak_ptr<DeviceRegistry>>();  // never destroyed: used until exit
  return *map;
}

/// The model file's placement: key, as Model itself reads it.
PlacementPolicy policy_of_file(const Graph& graph) {
  PlacementPolicy policy;
  if (graph.placement) apply_placement_spec(*graph.placement, policy);
  return policy;
}

}  // namespace

std::shared_ptr<DeviceRegistry> shared_registry(const DeviceOptions& options) {
  Key key{options.sim_gpus, options.sim_gpu_memory.value_or(0), options.logical_gpus, options.sim_gpu_memories};
  std::lock_guard<std::mutex> lock(registries_mutex());
  if (auto registry = registries()[key].lock()) return registry;
  auto registry = std::make_shared<DeviceRegistry>(options);
  registries()[key] = registry;
  return registry;
}

std::shared_ptr<DeviceRegistry> registry_of(Model& model) {
  DeviceRegistry* placed = model.placed() ? model.device_registry() : nullptr;
  if (!placed) return nullptr;
  std::lock_guard<std::mutex> lock(registries_mutex());
  for (const auto& [key, weak] : registries())
    if (auto registry = weak.lock(); registry.get() == placed) return registry;
  return nullptr;  // placed on a registry of its own (its file's GPUs): not shared
}

Device parse_device_argument(const std::string& text, const std::string& what) {
  std::optional<Device> device = Device::parse(text);
  if (!device) throw UserError(what + ": '" + text + "' is not a device; write cpu, cuda or cuda:N");
  return *device;
}

void place_model(Model& model, const PlaceArguments& arguments) {
  DeviceOptions options;
  if (arguments.sim_gpus) {
    if (*arguments.sim_gpus < 0 || *arguments.sim_gpus > max_sim_gpus)
      throw UserError("place(sim_gpus=" + std::to_string(*arguments.sim_gpus) + "): give 0 to " +
                      std::to_string(max_sim_gpus) + " simulated GPUs");
    options.sim_gpus = *arguments.sim_gpus;
  }
  if (arguments.logical_gpus) {
    if (*arguments.logical_gpus < 0 || *arguments.logical_gpus > max_sim_gpus)
      throw UserError("place(logical_gpus=" + std::to_string(*arguments.logical_gpus) + "): give 0 to " +
                      std::to_string(max_sim_gpus));
    options.logical_gpus = *arguments.logical_gpus;
  }
  if (arguments.sim_gpu_memory)  // "4GiB" for every GPU, or "4GiB,2GiB,2GiB" one per GPU
    set_sim_gpu_memory(options, *arguments.sim_gpu_memory, "place(sim_gpu_memory=" + *arguments.sim_gpu_memory + ")");

  PlacementPolicy policy = policy_of_file(model.graph());
  if (arguments.policy) {
    const auto& names = placement_policy_names();
    if (std::find(names.begin(), names.end(), *arguments.policy) == names.end())
      throw UserError("place(policy='" + *arguments.policy +
                      "'): not a policy; write annotations, embeddings-on-cpu or balanced");
    policy.name = *arguments.policy;
  }
  if (arguments.max_memory) {  // the CLI's --max-memory text: "8GiB" or "cuda:0=6GiB,cpu=20GiB"; it replaces the file's
    policy.max_memory.reset();
    policy.device_max_memory.clear();
    try {
      parse_max_memory(*arguments.max_memory, policy);
    } catch (const UserError& e) {
      throw UserError("place(max_memory=" + *arguments.max_memory + "): " + e.what());
    }
  }
  for (const auto& [pattern, device] : arguments.patterns) {
    if (pattern.empty()) throw UserError("place(place=...): an empty pattern for " + device + "; write a glob such as 'encoder.*'");
    policy.place_overrides.emplace_back(pattern, parse_device_argument(device, "place(place={'" + pattern + "': ...})"));
  }

  const bool all_on_cpu = !arguments.patterns.empty() && arguments.patterns.back().first == "*" &&
                          policy.place_overrides.back().second == Device::cpu() && !arguments.policy;
  if (all_on_cpu) {
    model.to(Device::cpu());
    return;
  }
  // A device the machine lacks is refused when the model is planned (its first pass, or
  // plan()), with the message `tandem run` gives: it names the layer that asked for it.
  model.use_devices(shared_registry(options), std::move(policy));
}

void move_model(Model& model, const std::string& text, Model* devices_of) {
  Device device = parse_device_argument(text, "to()");
  if (device == Device::cpu()) {
    model.to(device);
    return;
  }
  // The devices the model (or the one it is a replica of) was placed on, when they have this
  // one: model.place(sim_gpus=2) then to('cuda:1') stays on those two GPUs.
  std::shared_ptr<DeviceRegistry> registry = devices_of ? registry_of(*devices_of) : nullptr;
  if (!registry || !registry->has(device)) registry = registry_of(model);
  if (!registry || !registry->has(device)) registry = shared_registry(DeviceOptions{});
  if (!registry->has(device)) {
    std::string have;
    for (const DeviceInfo& info : registry->inventory().devices) have += (have.empty() ? "" : ", ") + info.device.str();
    throw UserError("to('" + text + "'): " + device.str() + " does not exist here (this machine has " + have +
                    "); place the model on simulated GPUs first, model.place(sim_gpus=N), or set TANDEM_SIM_GPUS=N "
                    "before the model is made; or use to('cpu')");
  }
  PlacementPolicy policy = policy_of_file(model.graph());
  policy.place_overrides = {{"*", device}};
  model.use_devices(std::move(registry), std::move(policy));
}

}  // namespace tandem::python
