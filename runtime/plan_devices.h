// The devices a placed plan runs on, as both placed executors (inference and training)
// hold them: each with its allocator, its simulated GPU and a oneDNN context of its own
// (a queue thread needs its own stream), and the counters of its device report.
#pragma once

#include <algorithm>
#include <memory>
#include <vector>

#include "backends/cpu/cpu_context.h"
#include "backends/sim/sim_gpu.h"
#include "placement/plan.h"
#include "runtime/device_registry.h"

namespace tandem {

struct PlanDevice {
  Device device;
  Allocator* allocator = nullptr;
  SimGpu* gpu = nullptr;                    // null for the cpu
  std::unique_ptr<CpuContext> own_context;  // a GPU's: its queue thread's oneDNN stream
  CpuContext* context = nullptr;
  // counted for the report
  QueueStats before;
  double cpu_busy_seconds = 0;
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
      state->context = &cpu;
    } else {
      state->gpu = &registry.sim_gpu(d);
      state->own_context = std::make_unique<CpuContext>();
      state->context = state->own_context.get();
    }
    devices.push_back(std::move(state));
  }
  return devices;
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
