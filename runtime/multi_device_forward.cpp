#include "runtime/multi_device_forward.h"

#include <algorithm>

#include "backends/trace.h"
#include "runtime/trace_args.h"
#include "core/error.h"
#include "runtime/device_parameter_cache.h"
#include "runtime/device_registry.h"
#include "runtime/node_kernels.h"
#include "runtime/placed_schedule.h"

namespace tandem {

MultiDeviceForward::MultiDeviceForward(const Graph& given, const Plan& plan, const Bindings& bindings,
                                       const TensorMap& params, DeviceRegistry& registry, uint64_t params_version,
                                       DeviceParameterCache* shared)
    : plan_(plan),
      graph_(executed_graph(plan_, given)),  // replicated data_parallel blocks: the plan keeps it
      input_count_(given.inputs.size()),
      value_shapes_(concrete_shapes(graph_, bindings)) {
  TANDEM_ASSERT(!plan_.training, "MultiDeviceForward runs inference plans only");
  const Graph& graph = graph_;
  if (!shared) {
    static const TensorMap no_gradients;
    static TouchedRowsMap no_rows;  // inference asks for no gradient: never touched
    own_cache_ = std::make_unique<DeviceParameterCache>(params, no_gradients, no_rows, registry);
    shared = own_cache_.get();
  }
  cache_ = shared;
  schedule_ = std::make_unique<PlacedSchedule>(
      graph, plan_, value_shapes_, registry, /*trailing_copies=*/true,
      [&](const ParamSpec& p, Device device, const std::string& context) { return cache_->weight(p.name, device, context); });
  const PlacedSchedule& s = *schedule_;
  for (const GraphOutput& out : graph.outputs) output_slots_.push_back(s.find_slot(out.value, 0, "the output gather"));

  const size_t n_slots = s.slot_keys.size();
  last_reader_.assign(n_slots, -1);
  for (size_t i = 0; i < s.actions.size(); ++i) {
    const PlacedAction& a = s.actions[i];
    if (a.kind == PlacedAction::Kind::copy) last_reader_[a.src_slot] = static_cast<int>(i);
    for (int slot : a.in_slots) last_reader_[slot] = static_cast<int>(i);
  }
  for (int slot : output_slots_) last_reader_[slot] = -1;
  // An event after a layer's output only where a reader runs on another lane: a copy (its
  // lane is the mover's, queue_copy) or a layer on another device.
  read_elsewhere_.assign(n_slots, false);
  std::vector<int> producer(n_slots, -1);  // slot -> the device whose compute lane writes it
  for (const PlacedAction& a : s.actions)
    if (a.kind == PlacedAction::Kind::op) producer[a.out_slot] = a.device;
  for (const PlacedAction& a : s.actions) {
    if (a.kind == PlacedAction::Kind::copy) read_elsewhere_[a.src_slot] = true;
    for (int slot : a.in_slots) read_elsewhere_[slot] = read_elsewhere_[slot] || producer[slot] != a.device;
  }
  for (size_t i = s.actions.size(); i-- > 0;)  // a view's readers read its input's storage
    if (s.actions[i].kind == PlacedAction::Kind::op && !s.actions[i].kernel && read_elsewhere_[s.actions[i].out_slot])
      read_elsewhere_[s.actions[i].in_slots[0]] = true;
  slots_.resize(n_slots);
  ready_.resize(n_slots);
  ready_lane_.assign(n_slots, nullptr);
  copy_parameters(params_version);  // compile time: a one-off, not in any run's report
  synchronize_devices(s.devices);
}

MultiDeviceForward::~MultiDeviceForward() { drain_lanes(); }

void MultiDeviceForward::drain_lanes() noexcept { drain_devices(schedule_->devices); }

void MultiDeviceForward::copy_parameters(uint64_t params_version) {
  DeviceParameterCache::Traffic uploaded = cache_->refresh(params_version);
  PlanDevice& cpu = *schedule_->devices[0];
  cpu.counted_here.bytes_out += uploaded.bytes;
  cpu.counted_here.copies_out += uploaded.copies;
  params_version_ = params_version;
}

void MultiDeviceForward::call_hook(const PlacedAction& a) {
  if (!hook_) return;
  LayerCall call{a.node, schedule_->devices[a.device]->device, {}, value_shapes_[a.node->output]};
  for (int v : a.node->inputs) call.input_shapes.push_back(value_shapes_[v]);
  // after the layer, on its lane
  schedule_->compute_lane(a).submit([hook = hook_, call = std::move(call)] { (*hook)(call); });
}

void MultiDeviceForward::run_action(size_t index, uint64_t params_version) {
  PlacedSchedule& s = *schedule_;
  const PlacedAction& a = s.actions[index];
  PlanDevice& dev = *s.devices[a.device];
  if (a.kind == PlacedAction::Kind::copy) {
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
  for (int slot : a.in_slots) inputs.push_back(slots_[slot]);
  Tensor out = allocate(out_shape, graph_.values[node.output].type.dtype, s.allocator_for(a.out_slot, a.device), a.context);
  slots_[a.out_slot] = out;
  for (int slot : a.in_slots)  // the host never waits: the lane does
    if (ready_lane_[slot] != &lane) lane.wait(ready_[slot]);
  const uint64_t seed = static_cast<uint64_t>(a.step);
  TraceLabel label(a.context, "forward");
  TraceArgs args(Trace::active() ? layer_trace_args(node, dev.device, inputs, out_shape, out.dtype()) : std::string());
  lane.submit(
      [&a, inputs = std::move(inputs), out, seed, params_version]() mutable {
        forward_naming_layer(*a.kernel, KernelArgs{inputs, a.params, {&out, 1}, false, seed, params_version},
                             a.context);
      },
      s.replica_groups.group_of(static_cast<int>(index)));
  call_hook(a);
  ready_[a.out_slot] = read_elsewhere_[a.out_slot] ? lane.record() : DeviceEvent();
  ready_lane_[a.out_slot] = &lane;
}

std::vector<Tensor> MultiDeviceForward::run(const std::vector<Tensor>& inputs, uint64_t params_version,
                                            const ForwardHook* hook) {
  PlacedSchedule& s = *schedule_;
  hook_ = hook && *hook ? hook : nullptr;
  start_device_reports(s.devices);
  // new weights since the last run go up now, and count as this run's traffic
  if (params_version != params_version_) copy_parameters(params_version);
  std::vector<Tensor> outputs;
  auto forget = [&] {
    for (Tensor& t : slots_) t = Tensor();
    for (DeviceEvent& e : ready_) e = DeviceEvent();
  };
  try {
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
      const PlacedAction& a = s.actions[i];
      auto release = [&](int slot) {
        if (last_reader_[slot] == static_cast<int>(i)) slots_[slot] = Tensor(), ready_[slot] = DeviceEvent();
      };
      if (a.kind == PlacedAction::Kind::copy) release(a.src_slot);
      for (int slot : a.in_slots) release(slot);
      if (a.out_slot >= 0 && last_reader_[a.out_slot] < 0 &&
          std::find(output_slots_.begin(), output_slots_.end(), a.out_slot) == output_slots_.end())
        slots_[a.out_slot] = Tensor();  // read by nobody
    }
    synchronize_devices(s.devices);  // rethrows a failed task's error
    for (int slot : output_slots_) outputs.push_back(slots_[slot]);
  } catch (...) {
    drain_lanes();
    forget();
    throw;
  }
  forget();
  report_ = device_reports(s.devices);
  return outputs;
}

}  // namespace tandem
