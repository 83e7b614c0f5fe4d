#include "runtime/exec/forward_executor.h"

#include <algorithm>

#include "backends/trace.h"
#include "core/error.h"
#include "runtime/devices/device_registry.h"
#include "runtime/exec/buffer_plan.h"
#include "runtime/exec/layer_seed.h"
#include "runtime/exec/liveness.h"
#include "runtime/exec/node_kernels.h"
#include "runtime/exec/schedule.h"
#include "runtime/exec/trace_args.h"
#include "runtime/params/device_parameter_cache.h"

namespace tandem {

ForwardExecutor::ForwardExecutor(const Graph& given, const Plan& plan, const Bindings& bindings,
                                 DeviceParameterCache& cache, DeviceRegistry& registry, uint64_t params_version,
                                 bool regions)
    : plan_(plan),
      graph_(executed_graph(plan_, given)),  // replicated data_parallel blocks: the plan keeps it
      input_count_(given.inputs.size()),
      value_shapes_(concrete_shapes(graph_, bindings)),
      cache_(cache) {
  TANDEM_ASSERT(!plan_.training, "ForwardExecutor runs inference plans only");
  schedule_ = std::make_unique<Schedule>(
      graph_, plan_, value_shapes_, registry, /*trailing_copies=*/true,
      [&](const ParamSpec& p, Device device, const std::string& context) { return cache_.weight(p.name, device, context); },
      regions);
  const Schedule& s = *schedule_;
  const size_t n_slots = s.slot_keys.size();
  is_output_.assign(n_slots, false);
  for (const GraphOutput& out : graph_.outputs) {
    output_slots_.push_back(s.find_slot(out.value, 0, "the output gather"));
    is_output_[output_slots_.back()] = true;
  }
  last_reader_ = last_forward_readers(s);
  // An event after a layer's output only where a reader runs on another lane: a copy (its
  // lane is the mover's, queue_copy) or a layer on another device.
  read_elsewhere_.assign(n_slots, false);
  std::vector<int> producer(n_slots, -1);  // slot -> the device whose compute lane writes it
  for (const ScheduleAction& a : s.actions)
    if (a.kind == ScheduleAction::Kind::op) producer[a.out_slot] = a.device;
  for (const ScheduleAction& a : s.actions) {
    if (a.kind == ScheduleAction::Kind::copy) read_elsewhere_[a.src_slot] = true;
    for (int slot : a.in_slots) read_elsewhere_[slot] = read_elsewhere_[slot] || producer[slot] != a.device;
  }
  for (size_t i = s.actions.size(); i-- > 0;)  // a view's readers read its input's storage
    if (s.actions[i].is_view() && read_elsewhere_[s.actions[i].out_slot])
      read_elsewhere_[s.actions[i].in_slots[0]] = true;
  slots_.resize(n_slots);
  ready_.resize(n_slots);
  ready_lane_.assign(n_slots, nullptr);
  allocate_buffers();
  copy_parameters(params_version);  // compile time: a one-off, not in any run's report
  synchronize_devices(s.devices);
}

ForwardExecutor::~ForwardExecutor() { drain_lanes(); }

void ForwardExecutor::drain_lanes() noexcept { drain_devices(schedule_->devices); }

void ForwardExecutor::allocate_buffers() {
  const Schedule& s = *schedule_;
  BufferPlan plan = plan_buffers(graph_, s, value_shapes_, output_slots_);
  buffer_of_slot_ = std::move(plan.buffer_of_slot);
  for (const BufferPlan::Buffer& b : plan.buffers) {
    const ScheduleAction& a = s.actions[b.sized_by];
    const std::string what = a.context + " output " + shape_str(value_shapes_[a.node->output]) +
                             " (in a buffer that layers after it reuse)";
    buffers_.push_back(allocate({static_cast<int64_t>((b.bytes + 7) / 8)}, DType::int64,
                                s.devices[b.device]->backend->allocator(), what));
    buffer_bytes_ += buffers_.back().nbytes();
  }
  // kernels on one device run one at a time on its lane: they share one workspace
  workspaces_.resize(s.devices.size());
  for (size_t d = 0; d < s.devices.size(); ++d) {
    size_t bytes = 0;
    for (const ScheduleAction& a : s.actions)
      if (a.kind == ScheduleAction::Kind::op && a.kernel && a.device == static_cast<int>(d))
        bytes = std::max(bytes, a.kernel->workspace_bytes());
    if (bytes == 0) continue;
    workspaces_[d] = allocate({static_cast<int64_t>((bytes + 7) / 8)}, DType::int64, s.devices[d]->backend->allocator(),
                              "the workspace of the fused layers on " + s.devices[d]->device.str());
    buffer_bytes_ += workspaces_[d].nbytes();
  }
}

void ForwardExecutor::copy_parameters(uint64_t params_version) {
  DeviceParameterCache::Traffic uploaded = cache_.refresh(params_version);
  PlanDevice& cpu = *schedule_->devices[0];
  cpu.counted_here.bytes_out += uploaded.bytes;
  cpu.counted_here.copies_out += uploaded.copies;
  params_version_ = params_version;
}

void ForwardExecutor::call_hook(const ScheduleAction& a) {
  if (!hook_) return;
  PlanDevice& dev = *schedule_->devices[a.device];
  PlanDevice& cpu = *schedule_->devices[0];
  LayerCall call{a.node, dev.device, {}, value_shapes_[a.node->output], {}, {}};
  for (int v : a.node->inputs) call.input_shapes.push_back(value_shapes_[v]);
  // The layer's tensors as the host can read them: a cpu layer's own, read on its lane
  // before a later layer reuses their buffers; a device's copied to the host on its compute
  // lane right after the layer (ordered as the layer's own reads), the hook on the cpu's
  // lane once the copies are done. So every call of a forward comes on the cpu's lane.
  // A kernel's lane waited for its inputs; a view's did not (its input may still be on its
  // way from another lane), and the copies and the hook read them: wait for them here.
  Lane& reader = *dev.compute;
  for (int slot : a.in_slots)
    if (ready_lane_[slot] != &reader) reader.wait(ready_[slot]);
  std::vector<int> slots = a.in_slots;
  slots.push_back(a.out_slot);
  std::vector<Tensor> host;
  for (int slot : slots) {
    const Tensor& t = slots_[slot];
    if (&dev == &cpu) {
      host.push_back(t);
      continue;
    }
    Tensor copy = Tensor::empty(t.shape(), t.dtype());
    if (t.nbytes() > 0) dev.backend->copy(*dev.compute, buffer_of(copy), buffer_of(t), t.nbytes());
    host.push_back(std::move(copy));
  }
  call.output = host.back();
  host.pop_back();
  call.inputs = std::move(host);
  if (&dev != &cpu) cpu.compute->wait(dev.compute->record());
  cpu.compute->submit([hook = hook_, call = std::move(call)] { (*hook)(call); });
}

void ForwardExecutor::run_action(size_t index, uint64_t params_version) {
  Schedule& s = *schedule_;
  const ScheduleAction& a = s.actions[index];
  PlanDevice& dev = *s.devices[a.device];
  if (a.kind == ScheduleAction::Kind::copy) {
    const Tensor& src = slots_[a.src_slot];
    Tensor dst = allocate(src.shape(), src.dtype(), s.allocator_for(a.dst_slot, a.device), a.context);
    TraceLabel label(a.context, "copy");
    TraceArgs args(Trace::active() ? copy_trace_args(s.devices[a.from_device]->device, dev.device, src) : std::string());
    Lane& lane = queue_copy(*s.devices[a.from_device], dev, src, dst, ready_lane_[a.src_slot], ready_[a.src_slot]);
    ready_[a.dst_slot] = lane.record();
    ready_lane_[a.dst_slot] = &lane;
    slots_[a.dst_slot] = std::move(dst);
    return;
  }
  if (a.fused_away) return;  // its region's kernel computes it
  Lane& lane = *dev.compute;
  const Node& node = *a.node;
  const Shape& out_shape = value_shapes_[node.output];
  if (!a.kernel) {  // a view: same storage, same device, ready when its input is
    slots_[a.out_slot] = slots_[a.in_slots[0]].view(out_shape);
    ready_[a.out_slot] = ready_[a.in_slots[0]];
    ready_lane_[a.out_slot] = ready_lane_[a.in_slots[0]];
    call_hook(a);
    return;
  }
  std::vector<Tensor> inputs;
  inputs.reserve(a.in_slots.size());
  for (int slot : a.in_slots) inputs.push_back(slots_[slot]);
  const DType dtype = graph_.values[node.output].type.dtype;
  const int buffer = buffer_of_slot_[a.out_slot];
  Tensor out = buffer >= 0 ? Tensor::from_storage(buffers_[buffer].storage(), out_shape, dtype)
                           : allocate_output(out_shape, dtype, s.allocator_for(a.out_slot, a.device), a.context);
  slots_[a.out_slot] = out;
  for (int slot : a.in_slots)  // the host never waits: the lane does
    if (ready_lane_[slot] != &lane) lane.wait(ready_[slot]);
  const uint64_t seed = layer_seed(0, a.step);
  TraceLabel label(a.context, "forward");
  TraceArgs args(Trace::active() ? layer_trace_args(node, dev.device, inputs, out_shape, out.dtype()) : std::string());
  void* workspace = workspaces_[a.device].defined() ? workspaces_[a.device].raw_data() : nullptr;
  lane.submit(
      [&a, inputs = std::move(inputs), out, seed, params_version, workspace]() mutable {
        forward_naming_layer(*a.kernel, KernelArgs{inputs, a.params, {&out, 1}, false, seed, params_version, workspace},
                             a.context);
      },
      s.replica_groups.group_of(static_cast<int>(index)));
  call_hook(a);
  ready_[a.out_slot] = read_elsewhere_[a.out_slot] ? lane.record() : DeviceEvent();
  ready_lane_[a.out_slot] = &lane;
}

std::vector<Tensor> ForwardExecutor::run(const std::vector<Tensor>& inputs, uint64_t params_version,
                                         const ForwardHook* hook) {
  submit(inputs, params_version, hook);
  return collect();
}

void ForwardExecutor::submit(const std::vector<Tensor>& inputs, uint64_t params_version, const ForwardHook* hook) {
  TANDEM_ASSERT(pass_done_.empty(), "a forward pass submitted while the last one was not collected");
  Schedule& s = *schedule_;
  hook_ = hook && *hook ? hook : nullptr;
  start_device_reports(s.devices);
  try {
    // new weights since the last run go up now, and count as this run's traffic
    if (params_version != params_version_) copy_parameters(params_version);
    for (size_t i = 0; i < input_count_; ++i) {
      const int slot = s.input_slots[i];
      slots_[slot] = inputs[i];
      ready_[slot] = DeviceEvent();
      ready_lane_[slot] = nullptr;
    }
    s.replica_groups.start_pass();
    for (size_t i = 0; i < s.actions.size(); ++i) {
      run_action(i, params_version);
      // the host lets go after the last reader is submitted; queued work keeps what it reads
      const ScheduleAction& a = s.actions[i];
      auto release = [&](int slot) {
        if (last_reader_[slot] == static_cast<int>(i) && !is_output_[slot]) slots_[slot] = Tensor(), ready_[slot] = DeviceEvent();
      };
      if (a.kind == ScheduleAction::Kind::copy) release(a.src_slot);
      for (int slot : a.in_slots) release(slot);
      if (a.out_slot >= 0) release(a.out_slot);  // read by nobody
    }
    // where this pass ends on every lane it may have used: collect() waits for these alone,
    // so work submitted after (the next batch's) runs on
    for (const auto& d : s.devices)
      for (LaneKind kind : {LaneKind::compute, LaneKind::copy_in, LaneKind::copy_out})
        pass_done_.push_back(d->backend->lane(kind).record());
  } catch (...) {
    abandon_pass();
    throw;
  }
}

std::vector<Tensor> ForwardExecutor::collect() {
  Schedule& s = *schedule_;
  std::vector<Tensor> outputs;
  try {
    HostSpan span("waiting for the devices");
    for (const DeviceEvent& done : pass_done_) done.wait();  // rethrows a failed task's error
    for (int slot : output_slots_) outputs.push_back(slots_[slot]);
  } catch (...) {
    abandon_pass();
    throw;
  }
  pass_done_.clear();
  forget_pass();
  report_ = device_reports(s.devices);
  return outputs;
}

void ForwardExecutor::restart_report() { start_device_reports(schedule_->devices); }

void ForwardExecutor::forget_pass() {
  for (Tensor& t : slots_) t = Tensor();
  for (DeviceEvent& e : ready_) e = DeviceEvent();
}

void ForwardExecutor::abandon_pass() noexcept {
  drain_lanes();
  pass_done_.clear();
  forget_pass();
}

}  // namespace tandem
