// Schedule: what the forward and the training executor build from a plan before they run
// anything, for a plan on the cpu alone as for one over many devices: the devices, the
// plan's op steps and forward copies as actions in execution order, the slot of every
// tensor on every device it lives on, each layer's kernel from its device's backend, and
// which kernels are one layer's replicas.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backends/kernel.h"
#include "graph/graph.h"
#include "placement/plan.h"
#include "runtime/exec/plan_devices.h"
#include "runtime/exec/replica_groups.h"

namespace tandem {

/// One op step or forward copy of the plan.
struct ScheduleAction {
  enum class Kind { op, copy } kind = Kind::op;
  int device = 0;       // op: where it runs; copy: the destination (indices into the devices)
  std::string context;  // "layer 'fc' (linear)": named in errors
  // op
  int step = -1;
  const Node* node = nullptr;
  std::unique_ptr<Kernel> kernel;  // null for views
  std::vector<Tensor> params;      // on `device`
  std::vector<int> in_slots;
  int out_slot = -1;
  /// Taken into a region whose kernel runs at a later action (inference_regions.h): runs
  /// nothing. A region's own action is its last layer's, with the region's kernel, every
  /// layer's parameters and the region's inputs as its in_slots.
  bool fused_away = false;
  int region_size = 1;  // layers its kernel computes

  /// A layer that shares its input's storage (no kernel, nothing fused away).
  bool is_view() const { return kind == Kind::op && !kernel && !fused_away; }
  // copy
  int from_device = 0;
  int src_slot = -1;
  int dst_slot = -1;
};

/// A layer's parameter on the device of `step`, named `context` when its memory runs out.
using ParameterSource = std::function<Tensor(const ParamSpec& param, Device device, const std::string& context)>;

/// Not copyable or movable (its slot table refers to its members).
class Schedule {
 public:
  /// `graph` is the executed graph (placement/plan.h, executed_graph). With
  /// `trailing_copies`, the plan's forward copies after the last step (the outputs'
  /// gather) are actions too. With `regions` (inference only), runs of layers that their
  /// backend fuses become one action each (inference_regions.h).
  Schedule(const Graph& graph, const Plan& plan, const std::vector<Shape>& shapes, DeviceRegistry& registry,
           bool trailing_copies, const ParameterSource& parameter, bool regions = false);
  Schedule(const Schedule&) = delete;
  Schedule& operator=(const Schedule&) = delete;

  /// The slot of `value` on devices[device], which `reader` reads.
  int find_slot(int value, int device, const std::string& reader) const { return slots_.find(value, device, reader); }
  /// The lane action `a` runs on: its device's compute lane (ops); copies choose theirs.
  Lane& compute_lane(const ScheduleAction& a) const { return *devices[a.device]->compute; }
  /// Where the tensor of `slot` (on devices[device]) is allocated: its device's memory, but
  /// a host tensor that a copy moves to or from a GPU comes from that GPU's host_allocator()
  /// (pinned memory for CUDA), so the copy is one asynchronous transfer instead of a memcpy
  /// through a staging buffer that holds the host thread. What torch leaves to the user
  /// (pin_memory), the plan knows.
  Allocator& allocator_for(int slot, int device) const;

  PlanDevices devices;                          // cpu first
  std::vector<std::pair<int, int>> slot_keys;   // slot -> (value, device)
  std::vector<ScheduleAction> actions;            // forward copies and op steps, in plan order
  std::vector<int> step_action;                 // op step -> its action
  std::vector<std::vector<int>> copies_before;  // op step -> the copy actions run just before it
  std::vector<int> input_slots;                 // graph input i -> its slot (on the cpu)
  std::vector<int> home_slot;                   // value -> the slot where it is produced (-1: none)
  ReplicaGroups replica_groups;                 // which op actions are one layer's replicas
  std::vector<int> host_memory_of;              // slot -> the device whose host memory holds it, or -1

 private:
  void choose_host_memory();
  /// Makes the kernel of every op action: a region's where its backend makes one.
  void make_kernels(const Graph& graph, const std::vector<Shape>& shapes, bool regions);
  SlotTable slots_;
};

}  // namespace tandem
