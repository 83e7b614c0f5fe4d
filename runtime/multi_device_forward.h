// MultiDeviceForward: a place() plan made runnable on the cpu and simulated GPUs, for one
// set of symbol values (inference only).
//
// What runs where: each op step runs on its plan device's queue: a simulated GPU's compute
// queue, or the registry's cpu queue (every device's kernels run on the engine's one compute
// thread, sim_engine.h). Each forward CopyStep of the plan becomes a copy on a GPU's queue
// (the destination's from the host, else the source's; SimGpu::activation_stream) into a
// buffer of the destination's pool, ordered by events against the other queues, so it
// overlaps the kernels that do not read it. An event is recorded
// after a tensor is written only when a reader runs on another queue, and that reader's queue
// waits on it (submit_wait): the calling thread only allocates and submits, then waits once
// for every queue at the end. Graph inputs start on the cpu; the outputs are gathered to
// the cpu.
//
// Memory: every output and every copy is allocated on the calling thread, in plan order,
// from its device's allocator; the calling thread drops its reference after the last reader
// is submitted, and the buffer returns to its pool once that reader has run (queued tasks
// hold their tensors). Parameters of a layer on a GPU are copied once into that GPU's pool
// at compile time, re-copied when params_version changes, and live nowhere else but the
// model's host copy.
//
// Errors: OutOfMemory while compiling or running is rethrown as e.in("layer 'fc' (linear)");
// a kernel's UserError names its layer too. After an error every queue is drained, so the
// next run starts clean.
#pragma once

#include <memory>
#include <vector>

#include "backends/cpu/cpu_context.h"
#include "backends/kernel.h"
#include "backends/sim/sim_gpu.h"
#include "graph/graph.h"
#include "graph/symbolic.h"
#include "placement/plan.h"
#include "runtime/device_report.h"
#include "runtime/forward_hook.h"
#include "runtime/replica_groups.h"

namespace tandem {

class DeviceParameterCache;
class DeviceRegistry;

/// Not thread-safe: one run at a time. Keeps references to the graph's nodes, the host
/// parameters, the cpu context and the registry, which must outlive it; it copies the plan. Real GPUs are
/// not supported yet (the registry refuses their allocators).
class MultiDeviceForward {
 public:
  /// Makes every kernel and copies the GPU layers' parameters to their devices.
  /// `params_version`: that of `params` now; a run under another copies them again.
  /// With `shared`, the GPU layers' parameters are its copies (shared with the model's other
  /// placed executors, training included; it must outlive this) instead of this object's own.
  MultiDeviceForward(const Graph& graph, const Plan& plan, const Bindings& bindings, CpuContext& cpu,
                     const TensorMap& params, DeviceRegistry& registry, uint64_t params_version,
                     DeviceParameterCache* shared = nullptr);
  /// Runs every queue dry (the tasks hold pointers into this object).
  ~MultiDeviceForward();
  MultiDeviceForward(const MultiDeviceForward&) = delete;
  MultiDeviceForward& operator=(const MultiDeviceForward&) = delete;

  /// Inputs in graph-input order (cpu tensors, checked by the caller); outputs in
  /// graph-output order, on the cpu.
  /// `hook`, when given, is called after each layer, on that layer's queue.
  std::vector<Tensor> run(const std::vector<Tensor>& inputs, uint64_t params_version, const ForwardHook* hook = nullptr);

  /// One entry per device of the plan's inventory that the plan uses (the cpu first), for
  /// the last run.
  const std::vector<DeviceReport>& report() const { return report_; }
  const Plan& plan() const { return plan_; }
  /// oneDNN primitives built in the GPUs' own contexts (each queue thread has its own
  /// stream: a dnnl::stream is for one thread at a time).
  int64_t primitives_created() const;

 private:
  struct DeviceState;
  struct Action;

  int slot(int value, int device) const;
  void copy_parameters(uint64_t params_version);
  /// Submits `action`; an op beside the other members of `group` (replica_groups.h).
  void run_action(const Action& action, uint64_t params_version, std::shared_ptr<TaskGroup> group);
  void call_hook(const Action& action, SimQueue& queue);
  void drain_queues() noexcept;

  const Plan plan_;
  DeviceRegistry& registry_;
  size_t input_count_ = 0;
  std::vector<Shape> value_shapes_;
  std::vector<std::unique_ptr<DeviceState>> devices_;  // cpu first
  std::vector<Action> actions_;                         // op steps and copies, in plan order
  ReplicaGroups replica_groups_;                        // which op actions are one layer's replicas
  std::vector<std::pair<int, int>> slot_keys_;          // slot -> (value, device)
  std::vector<Tensor> slots_;                           // a value's tensor on one device, during a run
  std::vector<Event> ready_;                            // per slot: reached once the tensor is written
  std::vector<SimQueue*> ready_queue_;                  // per slot: the queue that writes it (null: the host)
  std::vector<bool> read_elsewhere_;                    // per slot: read on a queue other than its writer's
  std::vector<int> last_reader_;                        // per slot: the last action reading it (-1: kept)
  std::vector<int> output_slots_;
  uint64_t params_version_ = ~uint64_t{0};
  DeviceParameterCache* shared_ = nullptr;
  const ForwardHook* hook_ = nullptr;  // during run()
  std::vector<DeviceReport> report_;
};

}  // namespace tandem
