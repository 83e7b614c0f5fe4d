// model.place(...) and model.to(...): the CLI's device and placement flags as keyword
// arguments (docs/python.md, "Devices"), over registries that models placed with the same
// device options share.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "runtime/devices/device_registry.h"
#include "runtime/model.h"

namespace tandem::python {

/// The devices for `options`: one registry per distinct set of options, shared by every
/// model placed with them (as cuda:0 is one device for every torch module), alive while a
/// model uses it.
std::shared_ptr<DeviceRegistry> shared_registry(const DeviceOptions& options);

/// The arguments of model.place(); unset ones leave the model file's choice (or the
/// environment's, TANDEM_SIM_GPUS and the like).
struct PlaceArguments {
  std::optional<std::string> policy;                          // --placement
  std::vector<std::pair<std::string, std::string>> patterns;  // --place PATTERN=DEVICE, in order
  std::optional<int> sim_gpus;                                // --sim-gpus
  std::optional<std::string> sim_gpu_memory;                  // --sim-gpu-memory
  std::optional<int> logical_gpus;                            // --logical-gpus
  std::optional<std::string> max_memory;                      // --max-memory
};

/// What `tandem run` and `tandem train` do with the same flags: `*` = cpu as the last
/// pattern runs every layer on the cpu (Model::to); anything else places the model over the
/// registry's devices. UserError for a policy, size or device that is not one; a device the
/// machine lacks is refused when the model is planned, as the CLI refuses it.
void place_model(Model& model, const PlaceArguments& arguments);

/// The shared registry `model` is placed on (shared_registry's), or null.
std::shared_ptr<DeviceRegistry> registry_of(Model& model);

/// torch's module.to(device): every layer on `device` ("cpu", "cuda", "cuda:1"): on the
/// devices `devices_of` (else the model itself) was placed on when they have it, else this
/// machine's (or TANDEM_SIM_GPUS's simulated) GPUs. UserError naming Python's ways out.
void move_model(Model& model, const std::string& device, Model* devices_of = nullptr);

/// "cuda:1" as a Device; UserError naming `what` when it is none.
Device parse_device_argument(const std::string& text, const std::string& what);

}  // namespace tandem::python
