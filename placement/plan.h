// Plan: where each layer runs and in which order, with the reason for each decision.
// A pure function of the graph and the devices: no allocation, no device calls.
#pragma once

#include <string>
#include <vector>

#include "core/device.h"
#include "graph/graph.h"

namespace tandem {

/// One device a plan may use, as the runtime found it.
struct DeviceInfo {
  Device device;
  size_t memory_bytes = 0;  // capacity (the host's RAM for the cpu)
  bool simulated = false;   // a simulated GPU (--sim-gpus): CPU kernels, its own memory pool
  std::string name;         // "AMD EPYC", "NVIDIA H100", "simulated GPU"
};

/// The devices a plan may use: the cpu first, then cuda:0, cuda:1, ... A value; placement
/// reads it and calls nothing.
struct DeviceInventory {
  std::vector<DeviceInfo> devices{DeviceInfo{Device::cpu(), 0, false, "cpu"}};
  bool has(Device d) const;
  /// The entry of `d`, or nullptr.
  const DeviceInfo* find(Device d) const;
};

struct OpStep {
  int node = -1;
  Device device;
  std::string reason;  // why this device: printed by `tandem check` and `tandem plan`
};

struct Plan {
  std::vector<OpStep> steps;      // in execution order
  std::vector<std::string> notes; // plan-wide remarks for the user (e.g. annotations not yet honoured)
};

/// Every layer on the CPU. Device annotations are read and reported: until multi-device
/// execution lands, a layer declared on a GPU runs on the CPU, with that as its reason.
Plan plan_on_cpu(const Graph& graph);

}  // namespace tandem
