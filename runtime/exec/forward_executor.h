// ForwardExecutor: a plan made runnable for inference, for one set of symbol values (one
// batch size). Every plan runs through it: one on the cpu alone (its lane the calling
// thread: backends/calling_thread_lane.h) as one placed over the cpu and GPUs. It reaches
// devices only through their backends (backends/backend.h), so simulated and real GPUs run
// the same code as the cpu.
//
// What runs where: each op step runs on its device's compute lane. Each forward CopyStep of
// the plan becomes a copy into a buffer of the destination's memory, queued by the rule of
// queue_copy (plan_devices.h), ordered by events against the other lanes, so it overlaps the
// kernels that do not read it. An event is recorded after a tensor is written only when a
// reader runs on another lane, and that reader's lane waits for it: the calling thread only
// submits, then waits once for every lane at the end. Graph inputs start on the cpu; the
// outputs are gathered to the cpu.
//
// Memory: compiling makes every kernel and lays the intermediates out in a few reused
// buffers per device (buffer_plan.h); running allocates only the outputs and the tensors
// that cross devices, on the calling thread, in plan order, from their device's allocator.
// Those the calling thread drops after their last reader is submitted, and a buffer returns
// to its pool once that reader has run (queued work holds its tensors; a stream lane's
// allocator orders reuse). Parameters of a layer on a GPU are the model's
// DeviceParameterCache's copies, uploaded at compile time and again when params_version
// changes; a cpu layer reads the host's tensors themselves.
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
#include "runtime/devices/device_report.h"
#include "runtime/forward_hook.h"

namespace tandem {

class DeviceParameterCache;
class DeviceRegistry;
class Schedule;
struct ScheduleAction;

/// Not thread-safe: one run at a time. Keeps references to the graph's nodes, the cache and
/// the registry, which must outlive it; it copies the plan.
class ForwardExecutor {
 public:
  /// Makes every kernel and the reused buffers, and copies the GPU layers' parameters to
  /// their devices. `params_version`: that of the parameters now; a run under another
  /// copies them again. With `regions`, runs of layers their backend fuses run as one
  /// kernel each (inference_regions.h); a forward hook then sees only the regions' last
  /// layers, so a pass with a hook is compiled without.
  ForwardExecutor(const Graph& graph, const Plan& plan, const Bindings& bindings, DeviceParameterCache& params,
                  DeviceRegistry& registry, uint64_t params_version, bool regions = false);
  /// Runs every lane dry (queued work holds pointers into this object).
  ~ForwardExecutor();
  ForwardExecutor(const ForwardExecutor&) = delete;
  ForwardExecutor& operator=(const ForwardExecutor&) = delete;

  /// Inputs in graph-input order (cpu tensors, checked by the caller); outputs in
  /// graph-output order, on the cpu. `hook`, when given, is called after each layer, on
  /// the cpu's lane, with the layer's tensors on the host (forward_hook.h).
  std::vector<Tensor> run(const std::vector<Tensor>& inputs, uint64_t params_version, const ForwardHook* hook = nullptr);

  /// run() in two halves, so that the host can submit the next batch (on another executor)
  /// while the devices still work on this one: submit() queues the pass and returns;
  /// collect() waits for this pass alone (an event recorded after it on every lane of the
  /// plan's devices) and returns its outputs. One pass in flight at a time; after an error
  /// in either, every lane is drained and nothing of the pass stays.
  void submit(const std::vector<Tensor>& inputs, uint64_t params_version, const ForwardHook* hook = nullptr);
  std::vector<Tensor> collect();
  /// Starts report()'s window now, for a pass submitted while another executor's was still
  /// running: consecutive windows then tile the time, and their sum counts each thing once.
  void restart_report();

  /// One entry per device of the plan's inventory that the plan uses (the cpu first), for
  /// the last run.
  const std::vector<DeviceReport>& report() const { return report_; }
  const Plan& plan() const { return plan_; }
  /// Bytes of the reused intermediate buffers, over every device.
  size_t buffer_bytes() const { return buffer_bytes_; }

 private:
  void copy_parameters(uint64_t params_version);
  void allocate_buffers();
  /// Submits action `index`.
  void run_action(size_t index, uint64_t params_version);
  void call_hook(const ScheduleAction& action);
  void drain_lanes() noexcept;
  /// Lets go of the pass's tensors (queued work keeps what it still reads).
  void forget_pass();
  /// After an error: every lane drained, the pass forgotten.
  void abandon_pass() noexcept;

  const Plan plan_;
  const Graph& graph_;  // the executed graph (the plan's replicated one, or the model's)
  size_t input_count_ = 0;
  std::vector<Shape> value_shapes_;
  DeviceParameterCache& cache_;
  std::unique_ptr<Schedule> schedule_;
  std::vector<Tensor> buffers_;         // the reused buffers (flat bytes)
  std::vector<int> buffer_of_slot_;     // per slot: its buffer, or -1
  std::vector<Tensor> workspaces_;      // per device: the largest workspace its kernels ask for
  size_t buffer_bytes_ = 0;
  std::vector<Tensor> slots_;           // a value's tensor on one device, during a run
  std::vector<DeviceEvent> ready_;      // per slot: reached once the tensor is written
  std::vector<Lane*> ready_lane_;       // per slot: the lane that writes it (null: the host)
  std::vector<bool> read_elsewhere_;    // per slot: read on a lane other than its writer's
  std::vector<int> last_reader_;        // per slot: the last action reading it
  std::vector<bool> is_output_;         // per slot: gathered as an output (kept to the end)
  std::vector<int> output_slots_;
  uint64_t params_version_ = ~uint64_t{0};
  const ForwardHook* hook_ = nullptr;  // during a pass
  std::vector<DeviceEvent> pass_done_;   // the pass in flight: where it ends on each lane
  std::vector<DeviceReport> report_;
};

}  // namespace tandem
