// The devices a placed plan runs on, as both placed executors (inference and training)
// hold them: each with its allocator, the queue its kernels run on (the registry's cpu
// queue, or the simulated GPU's compute queue), its simulated GPU, a oneDNN context, and
// the counters of its device report.
#pragma once

#include <algorithm>
#include <exception>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backends/cpu/cpu_context.h"
#include "backends/sim/sim_gpu.h"
#include "backends/sim/sim_trace.h"
#include "core/error.h"
#include "placement/plan.h"
#include "runtime/device_report.h"
#include "runtime/device_registry.h"

namespace tandem {

struct PlanDevice {
  Device device;
  Allocator* allocator = nullptr;
  SimQueue* queue = nullptr;                // where its kernels run
  SimGpu* gpu = nullptr;                    // null for the cpu
  std::unique_ptr<CpuContext> own_context;  // a GPU's own primitives and buffers, as a GPU's are
  CpuContext* context = nullptr;
  // counted for the report
  QueueStats before;
  QueueWork cpu_work_before;
  size_t bytes_in = 0, bytes_out = 0;
  int64_t copies_in = 0, copies_out = 0;
};

/// The cpu and every device the plan's steps and copies use, in inventory order (cpu
/// first). `State` derives from PlanDevice. UserError for a device the registry lacks.
template <class State>
std::vector<std::unique_ptr<State>> open_plan_devices(const Plan& plan, DeviceRegistry& registry, CpuContext& cpu) {
  std::vector<Device> used{Device::cpu()};
  for (const OpStep& s : plan.steps) used.push_back(s.device);
  for (const CopyStep& c : plan.copies) used.insert(used.end(), {c.from, c.to});
  std::sort(used.begin(), used.end());
  used.erase(std::unique(used.begin(), used.end()), used.end());
  std::vector<std::unique_ptr<State>> devices;
  for (Device d : used) {
    registry.require(d);
    auto state = std::make_unique<State>();
    state->device = d;
    state->allocator = &registry.allocator(d);
    if (d == Device::cpu()) {
      // Its own context, not the model's: the model's primitives were made on the calling
      // thread, and placed kernels run on the engine's compute thread (see
      // make_kernels_on_compute_thread).
      (void)cpu;
      state->own_context = std::make_unique<CpuContext>();
      state->context = state->own_context.get();
      state->queue = &registry.cpu_queue();
    } else {
      state->gpu = &registry.sim_gpu(d);
      state->queue = &state->gpu->queue();
      state->own_context = std::make_unique<CpuContext>();
      state->context = state->own_context.get();
    }
    devices.push_back(std::move(state));
  }
  return devices;
}

/// "layer 'fc' (linear)": how errors name a layer.
inline std::string layer_context(const Node& node) { return "layer '" + node.path + "' (" + node.op + ")"; }

/// Where `t`'s elements start in its storage, for a queue's copy.
inline BufferRef buffer_of(const Tensor& t) {
  return BufferRef{t.storage(), static_cast<size_t>(static_cast<const char*>(t.raw_data()) -
                                                    static_cast<const char*>(t.storage()->data()))};
}

/// Allocates on `allocator`, naming `context` when the device is out of memory.
inline Tensor allocate(const Shape& shape, DType dtype, Allocator& allocator, const std::string& context) {
  try {
    return Tensor::empty(shape, dtype, allocator);
  } catch (const OutOfMemory& e) {
    throw e.in(context);
  }
}

/// The slots of a placed executor: one per (value, device) where the plan puts a tensor,
/// numbered in the order they appear; `keys[slot]` is its (value, device).
template <class State>
class SlotTable {
 public:
  SlotTable(const Graph& graph, const std::vector<std::unique_ptr<State>>& devices,
            std::vector<std::pair<int, int>>& keys)
      : graph_(graph), devices_(devices), keys_(keys) {}
  /// A new slot for `value` on `device` (a bug in Tandem if it has one already).
  int add(int value, int device) {
    bool fresh = slot_of_.emplace(std::make_pair(value, device), static_cast<int>(keys_.size())).second;
    TANDEM_ASSERT(fresh, "value '" + graph_.values[value].name + "' arrives twice on " + devices_[device]->device.str());
    keys_.emplace_back(value, device);
    return static_cast<int>(keys_.size()) - 1;
  }
  /// The slot of `value` on `device`, which `reader` reads (a bug if the plan never put it there).
  int find(int value, int device, const std::string& reader) const {
    auto it = slot_of_.find({value, device});
    TANDEM_ASSERT(it != slot_of_.end(), reader + " reads '" + graph_.values[value].name + "' on " +
                                            devices_[device]->device.str() + ", where the plan never puts it");
    return it->second;
  }

 private:
  const Graph& graph_;
  const std::vector<std::unique_ptr<State>>& devices_;
  std::vector<std::pair<int, int>>& keys_;
  std::map<std::pair<int, int>, int> slot_of_;
};

/// Runs `make` (which builds the executor's kernels) on the engine's compute thread and
/// waits; rethrows what it threw. Why: with oneDNN's default (library) scratchpad, a
/// primitive must run on the thread that created it, and placed kernels run there.
template <class Make>
void make_kernels_on_compute_thread(DeviceRegistry& registry, Make&& make) {
  registry.cpu_queue().submit([&] { make(); });
  registry.cpu_queue().synchronize();
}

/// Starts a report window: peaks reset, counters taken as they are now.
template <class State>
void start_device_reports(const std::vector<std::unique_ptr<State>>& devices) {
  for (const auto& d : devices) {
    d->allocator->reset_peak();
    d->before = d->gpu ? d->gpu->stats() : QueueStats{};
    d->cpu_work_before = d->gpu ? QueueWork{} : d->queue->work();
    d->bytes_in = d->bytes_out = 0;
    d->copies_in = d->copies_out = 0;
  }
}

/// What each device did since start_device_reports (run its queues dry first).
template <class State>
std::vector<DeviceReport> device_reports(const std::vector<std::unique_ptr<State>>& devices) {
  std::vector<DeviceReport> reports;
  for (const auto& d : devices) {
    DeviceReport r;
    r.device = d->device;
    r.peak_bytes = d->allocator->peak_bytes();
    r.current_bytes = d->allocator->current_bytes();
    if (d->gpu) {
      QueueStats now = d->gpu->stats();
      r.busy_seconds = now.busy_seconds - d->before.busy_seconds;
      r.bytes_in = now.bytes_in - d->before.bytes_in;
      r.bytes_out = now.bytes_out - d->before.bytes_out;
      r.copies_in = static_cast<int64_t>(now.copies_in - d->before.copies_in);
      r.copies_out = static_cast<int64_t>(now.copies_out - d->before.copies_out);
    } else {  // the cpu's copies are the GPUs' work: the executor counts the cpu's side
      r.busy_seconds = d->queue->work().busy_seconds - d->cpu_work_before.busy_seconds;
      r.bytes_in = d->bytes_in;
      r.bytes_out = d->bytes_out;
      r.copies_in = d->copies_in;
      r.copies_out = d->copies_out;
    }
    reports.push_back(r);
  }
  return reports;
}

/// Runs every device's queues dry; rethrows the first error (after draining all).
template <class State>
void synchronize_devices(const std::vector<std::unique_ptr<State>>& devices) {
  HostSpan span("waiting for the devices");
  std::exception_ptr error;
  for (const auto& d : devices) {
    try {
      if (d->gpu) d->gpu->synchronize();
      else d->queue->synchronize();
    } catch (...) {
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
}

/// The same, for cleaning up after an error that is already on its way.
template <class State>
void drain_devices(const std::vector<std::unique_ptr<State>>& devices) noexcept {
  try {
    synchronize_devices(devices);
  } catch (...) {
  }
}

/// The index of `device` among `devices` (a bug in Tandem if it is not there).
template <class State>
int plan_device_index(const std::vector<std::unique_ptr<State>>& devices, Device device) {
  for (size_t i = 0; i < devices.size(); ++i)
    if (devices[i]->device == device) return static_cast<int>(i);
  TANDEM_ASSERT(false, "device " + device.str() + " missing from the plan's devices");
  return -1;
}

}  // namespace tandem
