// Plan: where each layer runs and in which order, with the reason for each decision.
// A pure function of the graph and the devices: no allocation, no device calls.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "core/device.h"
#include "graph/graph.h"
#include "graph/precision_choice.h"

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
  /// Without GPUs: why there are none ("no NVIDIA driver was found"), for messages.
  std::string no_gpu_reason;
  bool has(Device d) const;
  /// The entry of `d`, or nullptr.
  const DeviceInfo* find(Device d) const;
};

struct OpStep {
  int node = -1;
  Device device;
  std::string reason;  // why this device: printed by `tandem check` and `tandem plan`
  size_t parameter_bytes = 0;   // float32 parameters of the layer (place() fills it)
  size_t activation_bytes = 0;  // its output under the plan's bindings (place() fills it)
  /// What its matrix work runs in on `device`, as that device's kernel will (the layer's
  /// precision, or fp32 with the reason: PlacementPolicy::runs_in); place() fills it.
  PrecisionChoice precision;
};

/// A maximal run of consecutive op steps on one device: steps [first_step, end_step).
struct Segment {
  Device device;
  int first_step = 0;
  int end_step = 0;
};

/// Moving one tensor between devices. Forward copies move a value to a device that reads
/// it; in training each forward copy of a value that needs a gradient has a backward twin
/// that moves the gradient the other way (same value, from/to swapped, forward = false).
struct CopyStep {
  int value = -1;       // graph value id (a graph input, a layer output or a target)
  Device from;
  Device to;
  size_t bytes = 0;     // per batch, under the plan's bindings
  bool forward = true;  // false: the gradient of `value`, during backward
  /// Forward: the copy runs before op step `before_step` (steps.size(): after the last
  /// step, for outputs and the loss). Backward: the gradient copy runs after the backward
  /// of that step, i.e. when the reader's gradient of the value is complete.
  int before_step = 0;
  std::string reason;   // "read by 'fc' on cuda:0", "graph output gathered to the cpu"
};

/// What one device holds at the peak of a step, in bytes.
struct DeviceEstimate {
  Device device;
  size_t parameter_bytes = 0;
  size_t activation_bytes = 0;  // inference: largest live set; training: all kept for backward
  size_t gradient_bytes = 0;    // training: one gradient per parameter
  size_t optimizer_bytes = 0;   // training: optimizer state (Adam: 2x the parameters)
  size_t peak_bytes = 0;        // the sum of the above
  size_t capacity_bytes = 0;    // the inventory's capacity (0: unknown)
  size_t budget_bytes = 0;      // what the policy lets it use: its max_memory, else the capacity (0: no limit)
};

struct Plan {
  /// The graph the steps and copies index when place() replicated data_parallel blocks
  /// (placement/replicate.h); null: the graph given to place(). See executed_graph().
  std::shared_ptr<const Graph> graph;
  std::vector<OpStep> steps;      // in execution order
  std::vector<std::string> notes; // plan-wide remarks for the user (e.g. annotations not yet honoured)
  // Filled by place(); plan_on_cpu leaves them empty.
  std::vector<Segment> segments;          // same-device runs of steps, in order
  std::vector<CopyStep> copies;           // forward copies in execution order, then backward ones
  std::vector<DeviceEstimate> estimates;  // one per inventory device, in inventory order
  std::string policy;                     // the policy that placed the layers
  bool training = false;
  int64_t batch = 1;
};

/// One line per device whose predicted peak passes its budget: "cuda:0 is predicted to
/// need 9.3 MiB at its peak, but its budget (--max-memory) is 8.0 MiB". Empty: it fits.
std::vector<std::string> over_budget(const Plan& plan);

/// The graph whose nodes `plan`'s steps index: its replicated graph, or `given`, the one
/// it was placed from.
inline const Graph& executed_graph(const Plan& plan, const Graph& given) { return plan.graph ? *plan.graph : given; }

/// Every layer on the cpu, in graph order, with no copies: the single-device plan of a model
/// that names no GPU, or of one moved to the cpu (--place '*=cpu'); a layer's reason says
/// which, and a data_parallel block runs as one replica.
Plan plan_on_cpu(const Graph& graph);

}  // namespace tandem
