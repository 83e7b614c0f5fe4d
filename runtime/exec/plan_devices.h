// The devices a plan runs on, as both executors (inference and training)
// hold them: each device's Backend (backends/backend.h: the only way the executors reach
// a device), its compute lane, and the counters of its device report.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "core/error.h"
#include "placement/plan.h"
#include "runtime/devices/device_registry.h"
#include "runtime/devices/device_report.h"

namespace tandem {

struct PlanDevice {
  Device device;
  Backend* backend = nullptr;
  Lane* compute = nullptr;  // backend->lane(LaneKind::compute): where its kernels run
  // the report window
  DeviceCounters before;
  /// Copies run by other devices' backends that this device was the other end of (a
  /// backend counts only its own end): the cpu's side of every copy, a peer's source side.
  DeviceCounters counted_here;
};

using PlanDevices = std::vector<std::unique_ptr<PlanDevice>>;

/// The cpu and every device the plan's steps and copies use, in inventory order (cpu
/// first). UserError for a device the registry lacks or cannot open.
PlanDevices open_plan_devices(const Plan& plan, DeviceRegistry& registry);

/// The index of `device` among `devices` (a bug in Tandem if it is not there).
int plan_device_index(const PlanDevices& devices, Device device);

/// "layer 'fc' (linear)": how errors, traces and the schedule name a layer.
inline std::string layer_context(const Node& node) { return "layer '" + node.path + "' (" + node.op + ")"; }

/// Allocates on `allocator`, naming `context` when the device is out of memory or the tensor
/// is larger than one may be.
Tensor allocate(const Shape& shape, DType dtype, Allocator& allocator, const std::string& context);
/// A layer's output: as allocate(), named "`layer` output [shape]" (built only on failure).
Tensor allocate_output(const Shape& shape, DType dtype, Allocator& allocator, const std::string& layer);

/// Queues a copy of `src` (on `from`'s device) into `dst` (on `to`'s) and returns the lane
/// it is on. The rule: a device end's backend moves the bytes, on its copy_in lane for a
/// copy into it (from the host or a peer: the destination's), on its copy_out lane for a
/// copy out to the host. The lane first waits for `src_ready` unless `src_writer` (the lane
/// that wrote `src`; null: the host) is that lane. The other end is counted in its
/// counted_here. Ordering the copy's readers after it is the caller's.
Lane& queue_copy(PlanDevice& from, PlanDevice& to, const Tensor& src, const Tensor& dst, const Lane* src_writer,
                 const DeviceEvent& src_ready);

/// The slots of an executor: one per (value, device) where the plan puts a tensor,
/// numbered in the order they appear; `keys[slot]` is its (value, device).
class SlotTable {
 public:
  SlotTable(const Graph& graph, const PlanDevices& devices, std::vector<std::pair<int, int>>& keys)
      : graph_(graph), devices_(devices), keys_(keys) {}
  /// A new slot for `value` on `device` (a bug in Tandem if it has one already).
  int add(int value, int device);
  /// The slot of `value` on `device`, which `reader` reads (a bug if the plan never put it there).
  int find(int value, int device, const std::string& reader) const;

 private:
  const Graph& graph_;
  const PlanDevices& devices_;
  std::vector<std::pair<int, int>>& keys_;
  std::map<std::pair<int, int>, int> slot_of_;
};

/// Starts a report window: peaks reset, counters taken as they are now.
void start_device_reports(const PlanDevices& devices);
/// What each device did since start_device_reports (run its lanes dry first).
std::vector<DeviceReport> device_reports(const PlanDevices& devices);

/// Runs every device's lanes dry; rethrows the first error (after draining all).
void synchronize_devices(const PlanDevices& devices);
/// The same, for cleaning up after an error that is already on its way.
void drain_devices(const PlanDevices& devices) noexcept;

}  // namespace tandem
