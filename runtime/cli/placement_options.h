// The device and placement flags shared by `tandem plan` and `tandem run`: which devices
// (--sim-gpus, --sim-gpu-memory) and which policy (--placement, --max-memory, --place).
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "placement/place.h"
#include "runtime/devices/device_registry.h"
#include "runtime/model.h"

namespace tandem::cli {

struct PlacementFlags {
  int sim_gpus = -1;           // -1: from TANDEM_SIM_GPUS, else the real GPUs
  int logical_gpus = -1;       // -1: from TANDEM_LOGICAL_GPUS, else one device per real GPU
  std::string sim_gpu_memory;  // empty: TANDEM_SIM_GPU_MEMORY or 16 GiB
  std::string placement;       // empty: the model's placement:, else annotations
  std::string max_memory;
  std::vector<std::string> place;
  /// Whether a flag asks for placement (a device or policy flag was given).
  bool any_given() const { return sim_gpus >= 0 || logical_gpus >= 0 || !sim_gpu_memory.empty() || !placement.empty() || !place.empty() || !max_memory.empty(); }
};

/// Registers --sim-gpus (help: `sim_gpus_help`), --sim-gpu-memory and --logical-gpus.
void add_device_flags(CLI::App& app, PlacementFlags& flags, const std::string& sim_gpus_help);
/// Registers --placement, --max-memory and --place.
void add_policy_flags(CLI::App& app, PlacementFlags& flags);

/// A byte size given to `flag` ("64KiB"); UserError naming the flag when it is not one or is 0,
/// or, for a device's memory, a bare number (core/memory_size.h).
size_t size_option(const std::string& text, const std::string& flag, bool device_memory);
/// The registry's options from the device flags.
DeviceOptions device_options(const PlacementFlags& flags);
/// The model's placement: key, then --placement, --max-memory and --place over it. Batch,
/// bindings and training are left for the caller.
PlacementPolicy placement_policy(const PlacementFlags& flags, const Graph& graph);

/// Whether the flags move the whole model to the cpu: `--place '*=cpu'` last and no
/// --placement. `plan`, `run` and `train` read it alike, so that they agree.
bool everything_on_cpu(const PlacementFlags& flags);

/// What `run` and `train` do with the flags: `--place '*=cpu'` last runs every layer on the
/// cpu (Model::to: data_parallel blocks as one replica); any other device or policy flag,
/// `placed` (--report), or TANDEM_SIM_GPUS places the model over the registry's devices;
/// nothing leaves it where its file puts it (Model: on this machine's GPUs if it names any).
void apply_placement_flags(Model& model, const PlacementFlags& flags, bool placed);

}  // namespace tandem::cli
