// Plan: where each layer runs and in which order, with the reason for each decision.
// A pure function of the graph and the devices: no allocation, no device calls.
#pragma once

#include <string>
#include <vector>

#include "core/device.h"
#include "graph/graph.h"

namespace tandem {

/// The devices a plan may use.
struct DeviceInventory {
  std::vector<Device> devices{Device::cpu()};
  bool has(Device d) const;
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
