#include "runtime/exec/plan_devices.h"

#include <exception>

#include "backends/trace.h"

namespace tandem {

PlanDevices open_plan_devices(const Plan& plan, DeviceRegistry& registry) {
  std::vector<Device> used{Device::cpu()};
  for (const OpStep& s : plan.steps) used.push_back(s.device);
  for (const CopyStep& c : plan.copies) used.insert(used.end(), {c.from, c.to});
  std::sort(used.begin(), used.end());
  used.erase(std::unique(used.begin(), used.end()), used.end());
  PlanDevices devices;
  for (Device d : used) {
    auto state = std::make_unique<PlanDevice>();
    state->device = d;
    state->backend = &registry.backend(d);
    state->compute = &state->backend->lane(LaneKind::compute);
    devices.push_back(std::move(state));
  }
  return devices;
}

int plan_device_index(const PlanDevices& devices, Device device) {
  for (size_t i = 0; i < devices.size(); ++i)
    if (devices[i]->device == device) return static_cast<int>(i);
  TANDEM_ASSERT(false, "device " + device.str() + " missing from the plan's devices");
  return -1;
}

Tensor allocate(const Shape& shape, DType dtype, Allocator& allocator, const std::string& context) {
  try {
    return Tensor::empty(shape, dtype, allocator);
  } catch (const OutOfMemory& e) {
    throw e.in(context);
  } catch (const UserError& e) {  // larger than a tensor may be
    throw UserError(context + ": " + e.what());
  }
}

Tensor allocate_output(const Shape& shape, DType dtype, Allocator& allocator, const std::string& layer) {
  try {
    return Tensor::empty(shape, dtype, allocator);
  } catch (const UserError&) {
    return allocate(shape, dtype, allocator, layer + " output " + shape_str(shape));  // fails again, named
  }
}

Lane& queue_copy(PlanDevice& from, PlanDevice& to, const Tensor& src, const Tensor& dst, const Lane* src_writer,
                 const DeviceEvent& src_ready) {
  TANDEM_ASSERT(from.device != to.device, "a copy from " + from.device.str() + " to itself");
  const bool into_device = to.device != Device::cpu();
  PlanDevice& mover = into_device ? to : from;  // the device end; between two devices, the destination
  PlanDevice& other = into_device ? from : to;
  Lane& lane = mover.backend->lane(into_device ? LaneKind::copy_in : LaneKind::copy_out);
  if (src_writer != &lane) lane.wait(src_ready);
  const size_t bytes = src.nbytes();
  mover.backend->copy(lane, buffer_of(dst), buffer_of(src), bytes);
  if (into_device) {
    other.counted_here.bytes_out += bytes;
    ++other.counted_here.copies_out;
  } else {
    other.counted_here.bytes_in += bytes;
    ++other.counted_here.copies_in;
  }
  return lane;
}

int SlotTable::add(int value, int device) {
  bool fresh = slot_of_.emplace(std::make_pair(value, device), static_cast<int>(keys_.size())).second;
  TANDEM_ASSERT(fresh, "value '" + graph_.values[value].name + "' arrives twice on " + devices_[device]->device.str());
  keys_.emplace_back(value, device);
  return static_cast<int>(keys_.size()) - 1;
}

int SlotTable::find(int value, int device, const std::string& reader) const {
  auto it = slot_of_.find({value, device});
  TANDEM_ASSERT(it != slot_of_.end(), reader + " reads '" + graph_.values[value].name + "' on " +
                                          devices_[device]->device.str() + ", where the plan never puts it");
  return it->second;
}

void start_device_reports(const PlanDevices& devices) {
  for (const auto& d : devices) {
    d->backend->allocator().reset_peak();
    d->before = d->backend->counters();
    d->counted_here = DeviceCounters{};
  }
}

std::vector<DeviceReport> device_reports(const PlanDevices& devices) {
  std::vector<DeviceReport> reports;
  for (const auto& d : devices) {
    const DeviceCounters now = d->backend->counters();
    DeviceReport r;
    r.device = d->device;
    r.peak_bytes = d->backend->allocator().peak_bytes();
    r.current_bytes = d->backend->allocator().current_bytes();
    r.busy_seconds = now.busy_seconds - d->before.busy_seconds;
    r.bytes_in = now.bytes_in - d->before.bytes_in + d->counted_here.bytes_in;
    r.bytes_out = now.bytes_out - d->before.bytes_out + d->counted_here.bytes_out;
    r.copies_in = now.copies_in - d->before.copies_in + d->counted_here.copies_in;
    r.copies_out = now.copies_out - d->before.copies_out + d->counted_here.copies_out;
    reports.push_back(r);
  }
  return reports;
}

void synchronize_devices(const PlanDevices& devices) {
  HostSpan span("waiting for the devices");
  std::exception_ptr error;
  for (const auto& d : devices) {
    try {
      d->backend->synchronize();
    } catch (...) {
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
  // The work just waited for has run: a backend that times it on the device (CUDA events)
  // resolves it into the trace now, while the lanes are idle.
  if (Trace::active())
    for (const auto& d : devices) d->backend->collect_trace_spans();
}

void drain_devices(const PlanDevices& devices) noexcept {
  try {
    synchronize_devices(devices);
  } catch (...) {
  }
}

}  // namespace tandem
