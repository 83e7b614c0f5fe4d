#include "runtime/multi_device_forward.h"

#include <algorithm>
#include <map>

#include "backends/sim/sim_trace.h"
#include "core/error.h"
#include "runtime/device_registry.h"
#include "runtime/multi_device_training.h"
#include "runtime/node_kernels.h"
#include "runtime/plan_devices.h"

namespace tandem {

struct MultiDeviceForward::DeviceState : PlanDevice {
  std::vector<std::pair<Tensor, Tensor>> parameter_copies;  // (host, this device's copy)
};

struct MultiDeviceForward::Action {
  enum class Kind { op, copy } kind = Kind::op;
  int device = 0;                   // op: where it runs; copy: the destination
  SimQueue* queue = nullptr;        // where it runs: the device's compute queue, or a copy engine
  SimGpu::Stream stream = SimGpu::Stream::compute;  // copy: which of the GPU's queues `queue` is
  std::string context;              // "layer 'fc' (linear)": named in errors
  // op
  int step = -1;
  const Node* node = nullptr;
  std::unique_ptr<Kernel> kernel;   // null for views
  std::vector<Tensor> params;       // on `device`
  std::vector<int> in_slots;
  int out_slot = -1;
  DType out_dtype = DType::float32;
  // copy
  int from_device = 0;
  int src_slot = -1;
  int dst_slot = -1;
};

MultiDeviceForward::MultiDeviceForward(const Graph& given, const Plan& plan, const Bindings& bindings, CpuContext& cpu,
                                       const TensorMap& params, DeviceRegistry& registry, uint64_t params_version,
                                       DeviceParameterCache* shared)
    : plan_(plan),
      registry_(registry),
      input_count_(given.inputs.size()),
      value_shapes_(concrete_shapes(executed_graph(plan, given), bindings)),
      shared_(shared) {
  const Graph& graph = executed_graph(plan_, given);  // replicated data_parallel blocks: the plan keeps it
  TANDEM_ASSERT(!plan_.training, "MultiDeviceForward runs inference plans only");
  devices_ = open_plan_devices<DeviceState>(plan_, registry_, cpu);
  auto device_index = [&](Device d) { return plan_device_index(devices_, d); };

  SlotTable<DeviceState> slots(graph, devices_, slot_keys_);
  auto new_slot = [&](int value, int device) { return slots.add(value, device); };
  auto find_slot = [&](int value, int device, const std::string& reader) { return slots.find(value, device, reader); };
  for (const GraphInput& in : graph.inputs) new_slot(in.value, 0);

  // Parameters of GPU layers: one copy per (parameter, device), allocated now.
  std::vector<std::map<std::string, Tensor>> device_params(devices_.size());
  size_t next_copy = 0;
  for (size_t i = 0; i <= plan_.steps.size(); ++i) {
    for (; next_copy < plan_.copies.size() && plan_.copies[next_copy].forward &&
           plan_.copies[next_copy].before_step == static_cast<int>(i);
         ++next_copy) {
      const CopyStep& c = plan_.copies[next_copy];
      Action a;
      a.kind = Action::Kind::copy;
      a.from_device = device_index(c.from);
      a.device = device_index(c.to);
      a.context = i < plan_.steps.size() ? layer_context(graph.nodes[plan_.steps[i].node])
                                          : "gathering output '" + graph.values[c.value].name + "' to the cpu";
      a.src_slot = find_slot(c.value, a.from_device, "the copy to " + c.to.str());
      a.dst_slot = new_slot(c.value, a.device);
      // a GPU's queue does it: the source's, or the destination's from the host
      SimGpu* side = devices_[a.from_device]->gpu ? devices_[a.from_device]->gpu : devices_[a.device]->gpu;
      TANDEM_ASSERT(side, "a copy from the cpu to the cpu");
      a.stream = SimGpu::activation_stream;
      a.queue = &side->queue(a.stream);
      actions_.push_back(std::move(a));
    }
    if (i == plan_.steps.size()) break;
    const OpStep& s = plan_.steps[i];
    const Node& node = graph.nodes[s.node];
    Action a;
    a.step = static_cast<int>(i);
    a.node = &node;
    a.device = device_index(s.device);
    a.context = layer_context(node);
    DeviceState& dev = *devices_[a.device];
    a.queue = dev.queue;
    for (const ParamSpec& p : node.params) {
      const Tensor& host = params.at(p.name);
      if (!dev.gpu) {
        a.params.push_back(host);
        continue;
      }
      if (shared_) {
        a.params.push_back(shared_->weight(p.name, dev.device, a.context));
        continue;
      }
      auto [it, fresh] = device_params[a.device].emplace(p.name, Tensor());
      if (fresh) {
        it->second = allocate(host.shape(), host.dtype(), *dev.allocator, a.context);
        dev.parameter_copies.emplace_back(host, it->second);
      }
      a.params.push_back(it->second);
    }
    for (int v : node.inputs) a.in_slots.push_back(find_slot(v, a.device, a.context));
    a.out_slot = new_slot(node.output, a.device);
    a.out_dtype = graph.values[node.output].type.dtype;
    // kernels are made below, on the compute thread
    actions_.push_back(std::move(a));
  }
  TANDEM_ASSERT(next_copy == plan_.copies.size() || !plan_.copies[next_copy].forward,
                "a forward copy of the plan is out of order");
  for (const GraphOutput& out : graph.outputs) output_slots_.push_back(find_slot(out.value, 0, "the output gather"));

  make_kernels_on_compute_thread(registry_, [&] {
    for (Action& a : actions_)
      if (a.kind == Action::Kind::op && !a.node->schema->is_view)
        a.kernel = make_cpu_kernel(*devices_[a.device]->context, graph, *a.node, value_shapes_, a.params);
  });
  for (size_t i = 0; i < actions_.size(); ++i)
    if (actions_[i].kind == Action::Kind::op && actions_[i].kernel)
      replica_groups_.add(static_cast<int>(i), *actions_[i].node, actions_[i].queue);
  last_reader_.assign(slot_keys_.size(), -1);
  for (size_t i = 0; i < actions_.size(); ++i) {
    const Action& a = actions_[i];
    if (a.kind == Action::Kind::copy) last_reader_[a.src_slot] = static_cast<int>(i);
    for (int s : a.in_slots) last_reader_[s] = static_cast<int>(i);
  }
  for (int s : output_slots_) last_reader_[s] = -1;
  read_elsewhere_.assign(slot_keys_.size(), false);
  std::vector<SimQueue*> producer(slot_keys_.size(), nullptr);
  for (const Action& a : actions_)
    if (a.kind == Action::Kind::op) producer[a.out_slot] = a.queue;
  for (const Action& a : actions_) {
    auto read = [&](int s) { read_elsewhere_[s] = read_elsewhere_[s] || producer[s] != a.queue; };
    if (a.kind == Action::Kind::copy) read(a.src_slot);
    for (int s : a.in_slots) read(s);
  }
  for (size_t i = actions_.size(); i-- > 0;)  // a view's readers read its input's storage
    if (actions_[i].kind == Action::Kind::op && !actions_[i].kernel && read_elsewhere_[actions_[i].out_slot])
      read_elsewhere_[actions_[i].in_slots[0]] = true;
  slots_.resize(slot_keys_.size());
  ready_.resize(slot_keys_.size());
  ready_queue_.assign(slot_keys_.size(), nullptr);
  copy_parameters(params_version);  // compile time: a one-off, not in any run's report
  synchronize_devices(devices_);
}

MultiDeviceForward::~MultiDeviceForward() { drain_queues(); }

int64_t MultiDeviceForward::primitives_created() const {
  int64_t n = 0;
  for (const auto& d : devices_)
    if (d->own_context) n += d->own_context->primitives_created();
  return n;
}

void MultiDeviceForward::drain_queues() noexcept { drain_devices(devices_); }

void MultiDeviceForward::copy_parameters(uint64_t params_version) {
  // Queued on each GPU's compute queue, ahead of the kernels that read them.
  DeviceParameterCache::Traffic uploaded;
  if (shared_) uploaded = shared_->refresh(params_version);
  for (const auto& d : devices_)
    for (const auto& [host, copy] : d->parameter_copies) {
      TraceLabel label("a weight's upload");
      d->gpu->copy_from_host(buffer_of(copy), buffer_of(host), host.nbytes());
      uploaded.bytes += host.nbytes();
      ++uploaded.copies;
    }
  devices_[0]->bytes_out += uploaded.bytes;  // the cpu is devices_[0]
  devices_[0]->copies_out += uploaded.copies;
  params_version_ = params_version;
}

void MultiDeviceForward::call_hook(const Action& a, SimQueue& queue) {
  if (!hook_) return;
  LayerCall call{a.node, devices_[a.device]->device, {}, value_shapes_[a.node->output]};
  for (int v : a.node->inputs) call.input_shapes.push_back(value_shapes_[v]);
  queue.submit([hook = hook_, call = std::move(call)] { (*hook)(call); });  // after the layer, on its queue
}

void MultiDeviceForward::run_action(const Action& a, uint64_t params_version, std::shared_ptr<TaskGroup> group) {
  DeviceState& dev = *devices_[a.device];
  SimQueue& queue = *a.queue;
  auto wait_for = [&](int slot) {  // the host never waits: the queue does
    if (ready_queue_[slot] != &queue) queue.submit_wait(ready_[slot]);
  };
  if (a.kind == Action::Kind::copy) {
    DeviceState& from = *devices_[a.from_device];
    const Tensor& src = slots_[a.src_slot];
    Tensor dst = allocate(src.shape(), src.dtype(), *dev.allocator, a.context);
    size_t bytes = src.nbytes();
    wait_for(a.src_slot);
    TraceLabel label(a.context, "copy");
    const auto engine = a.stream;
    if (!from.gpu) {
      dev.gpu->copy_from_host(buffer_of(dst), buffer_of(src), bytes, engine);
      from.bytes_out += bytes;
      ++from.copies_out;
    } else if (!dev.gpu) {
      from.gpu->copy_to_host(buffer_of(dst), buffer_of(src), bytes, engine);
      dev.bytes_in += bytes;
      ++dev.copies_in;
    } else {
      from.gpu->copy_peer(*dev.gpu, buffer_of(dst), buffer_of(src), bytes, engine);
    }
    ready_[a.dst_slot] = queue.record();
    ready_queue_[a.dst_slot] = &queue;
    slots_[a.dst_slot] = std::move(dst);
    return;
  }
  const Node& node = *a.node;
  const Shape& out_shape = value_shapes_[node.output];
  if (!a.kernel) {  // a view: same storage, same device, ready when its input is
    slots_[a.out_slot] = slots_[a.in_slots[0]].view(out_shape);
    ready_[a.out_slot] = ready_[a.in_slots[0]];
    ready_queue_[a.out_slot] = ready_queue_[a.in_slots[0]];
    call_hook(a, queue);
    return;
  }
  std::vector<Tensor> inputs;
  for (int s : a.in_slots) inputs.push_back(slots_[s]);
  Tensor out = allocate(out_shape, a.out_dtype, *dev.allocator, a.context);
  slots_[a.out_slot] = out;
  for (int s : a.in_slots) wait_for(s);
  uint64_t seed = static_cast<uint64_t>(a.step);
  TraceLabel label(a.context, "forward");
  queue.submit(
      [&a, inputs = std::move(inputs), out, seed, params_version]() mutable {
        forward_naming_layer(*a.kernel, KernelArgs{inputs, a.params, {&out, 1}, false, seed, params_version},
                             a.context);
      },
      std::move(group));
  call_hook(a, queue);
  // an event only where a reader runs on another queue
  ready_[a.out_slot] = read_elsewhere_[a.out_slot] ? queue.record() : Event();
  ready_queue_[a.out_slot] = &queue;
}

std::vector<Tensor> MultiDeviceForward::run(const std::vector<Tensor>& inputs, uint64_t params_version,
                                            const ForwardHook* hook) {
  hook_ = hook && *hook ? hook : nullptr;
  start_device_reports(devices_);
  // new weights since the last run go up now, and count as this run's traffic
  if (params_version != params_version_) copy_parameters(params_version);
  std::vector<Tensor> outputs;
  try {
    for (size_t i = 0; i < input_count_; ++i) {
      slots_[i] = inputs[i];  // the input slots come first, in graph-input order
      ready_[i] = Event();
      ready_queue_[i] = nullptr;
    }
    replica_groups_.start_pass();
    for (size_t i = 0; i < actions_.size(); ++i) {
      run_action(actions_[i], params_version, replica_groups_.group_of(static_cast<int>(i)));
      // the host lets go after the last reader is submitted; queued tasks keep what they read
      const Action& a = actions_[i];
      auto release = [&](int s) {
        if (last_reader_[s] == static_cast<int>(i)) slots_[s] = Tensor(), ready_[s] = Event();
      };
      if (a.kind == Action::Kind::copy) release(a.src_slot);
      for (int s : a.in_slots) release(s);
      if (a.out_slot >= 0 && last_reader_[a.out_slot] < 0 &&
          std::find(output_slots_.begin(), output_slots_.end(), a.out_slot) == output_slots_.end())
        slots_[a.out_slot] = Tensor();  // read by nobody
    }
    synchronize_devices(devices_);  // rethrows a failed task's error
    for (int s : output_slots_) outputs.push_back(slots_[s]);
  } catch (...) {
    drain_queues();
    for (Tensor& t : slots_) t = Tensor();
    for (Event& e : ready_) e = Event();
    throw;
  }
  for (Tensor& t : slots_) t = Tensor();
  for (Event& e : ready_) e = Event();

  report_ = device_reports(devices_);
  return outputs;
}

}  // namespace tandem
