// MultiDeviceForward: a place() plan made runnable on the cpu and GPUs, for one set of
// symbol values (inference only). It reaches devices only through their backends
// (backends/backend.h), so simulated and real GPUs run the same code.
//
// What runs where: each op step runs on its device's compute lane. Each forward CopyStep
// of the plan becomes a copy into a buffer of the destination's memory, queued by the rule
// of queue_copy (plan_devices.h), ordered by events against the other lanes, so it overlaps
// the kernels that do not read it. An event is recorded after a tensor is written only when
// a reader runs on another lane, and that reader's lane waits for it: the calling thread
// only allocates and submits, then waits once for every lane at the end. Graph inputs start
// on the cpu; the outputs are gathered to the cpu.
//
// Memory: every output and every copy is allocated on the calling thread, in plan order,
// from its device's allocator; the calling thread drops its reference after the last reader
// is submitted, and the buffer returns to its pool once that reader has run (queued work
// holds its tensors; a stream lane's allocator orders reuse). Parameters of a layer on a
// GPU are the model's DeviceParameterCache's copies, uploaded at compile time and again
// when params_version changes.
//
// Errors: OutOfMemory while compiling or running is rethrown as e.in("layer 'fc' (linear)");
// a kernel's UserError names its layer too. After an error every lane is drained, so the
// next run starts clean.
#pragma once

#include <memory>
#include <vector>

#include "backends/lane.h"
#include "graph/graph.h"
#include "graph/symbolic.h"
#include "placement/plan.h"
#include "runtime/device_report.h"
#include "runtime/forward_hook.h"

namespace tandem {

class DeviceParameterCache;
class DeviceRegistry;
class PlacedSchedule;
struct PlacedAction;

/// Not thread-safe: one run at a time. Keeps references to the graph's nodes, the host
/// parameters and the registry, which must outlive it; it copies the plan.
class MultiDeviceForward {
 public:
  /// Makes every kernel and copies the GPU layers' parameters to their devices.
  /// `params_version`: that of `params` now; a run under another copies them again.
  /// With `shared`, the GPU layers' parameters are its copies (shared with the model's other
  /// placed executors, training included; it must outlive this) instead of this object's own.
  MultiDeviceForward(const Graph& graph, const Plan& plan, const Bindings& bindings, const TensorMap& params,
                     DeviceRegistry& registry, uint64_t params_version, DeviceParameterCache* shared = nullptr);
  /// Runs every lane dry (queued work holds pointers into this object).
  ~MultiDeviceForward();
  MultiDeviceForward(const MultiDeviceForward&) = delete;
  MultiDeviceForward& operator=(const MultiDeviceForward&) = delete;

  /// Inputs in graph-input order (cpu tensors, checked by the caller); outputs in
  /// graph-output order, on the cpu.
  /// `hook`, when given, is called after each layer, on that layer's lane.
  std::vector<Tensor> run(const std::vector<Tensor>& inputs, uint64_t params_version, const ForwardHook* hook = nullptr);

  /// One entry per device of the plan's inventory that the plan uses (the cpu first), for
  /// the last run.
  const std::vector<DeviceReport>& report() const { return report_; }
  const Plan& plan() const { return plan_; }

 private:
  void copy_parameters(uint64_t params_version);
  /// Submits action `index`, an op beside the other members of its replica group.
  void run_action(size_t index, uint64_t params_version);
  void call_hook(const PlacedAction& action);
  void drain_lanes() noexcept;

  const Plan plan_;
  const Graph& graph_;  // the executed graph (the plan's replicated one, or the model's)
  size_t input_count_ = 0;
  std::vector<Shape> value_shapes_;
  std::unique_ptr<DeviceParameterCache> own_cache_;  // when no shared one is given
  DeviceParameterCache* cache_ = nullptr;
  std::unique_ptr<PlacedSchedule> schedule_;
  std::vector<Tensor> slots_;           // a value's tensor on one device, during a run
  std::vector<DeviceEvent> ready_;      // per slot: reached once the tensor is written
  std::vector<Lane*> ready_lane_;       // per slot: the lane that writes it (null: the host)
  std::vector<bool> read_elsewhere_;    // per slot: read on a lane other than its writer's
  std::vector<int> last_reader_;        // per slot: the last action reading it (-1: kept)
  std::vector<int> output_slots_;
  uint64_t params_version_ = ~uint64_t{0};
  const ForwardHook* hook_ = nullptr;  // during run()
  std::vector<DeviceReport> report_;
};

}  // namespace tandem
