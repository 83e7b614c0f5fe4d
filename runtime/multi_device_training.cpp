#include "runtime/multi_device_training.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "backends/cpu/ops/op_util.h"
#include "backends/sim/sim_trace.h"
#include "core/error.h"
#include "runtime/device_registry.h"
#include "runtime/node_kernels.h"
#include "runtime/plan_devices.h"

namespace tandem {

struct MultiDeviceTraining::DeviceState : PlanDevice {
  size_t budget = 0;  // pool bytes the host may have in use before it waits for the queues
};

struct MultiDeviceTraining::Action {
  enum class Kind { op, copy } kind = Kind::op;
  int device = 0;       // op: where it runs; copy: the destination
  std::string context;  // "layer 'fc' (linear)": named in errors
  // op
  int step = -1;
  const Node* node = nullptr;
  std::unique_ptr<Kernel> kernel;  // null for views
  std::vector<Tensor> params, param_grads;  // on `device`
  // cpu layers: per parameter, the touched rows its kernel records (else null), and those
  // of the gradients it writes without recording (marked whole after its backward)
  std::vector<TouchedRows*> recorded_rows, unrecorded_rows;
  std::vector<int> in_slots;
  int out_slot = -1;
  // copy
  int from_device = 0;
  int src_slot = -1;
  int dst_slot = -1;
};

namespace {


/// Rows [start, start + length) of `t` along `dim`, copied into a new host tensor.
Tensor narrow_copy(const Tensor& t, int64_t dim, int64_t start, int64_t length) {
  Shape shape = t.shape();
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= shape[d];
  for (size_t d = dim + 1; d < shape.size(); ++d) inner *= shape[d];
  const size_t element = dtype_size(t.dtype());
  const size_t row = static_cast<size_t>(shape[dim] * inner) * element;
  const size_t slice = static_cast<size_t>(length * inner) * element;
  shape[dim] = length;
  Tensor out = Tensor::empty(shape, t.dtype());
  for (int64_t o = 0; o < outer; ++o)
    std::memcpy(static_cast<char*>(out.raw_data()) + o * slice,
                static_cast<const char*>(t.raw_data()) + o * row + static_cast<size_t>(start * inner) * element, slice);
  return out;
}

}  // namespace

// ---- MultiDeviceTraining -------------------------------------------------------------------

MultiDeviceTraining::MultiDeviceTraining(const Graph& given, const Plan& plan, const Bindings& bindings,
                                         CpuContext& cpu, DeviceParameterCache& cache, DeviceRegistry& registry,
                                         bool input_grads, const std::vector<int>& kept)
    : plan_(plan),
      graph_(executed_graph(plan_, given)),  // replicated data_parallel blocks: the plan keeps it
      cache_(cache),
      shapes_(concrete_shapes(graph_, bindings)) {
  const Graph& graph = graph_;
  const size_t n_values = graph.values.size();
  devices_ = open_plan_devices<DeviceState>(plan_, registry, cpu);
  auto device_index = [&](Device d) { return plan_device_index(devices_, d); };

  requires_grad_.assign(n_values, false);
  if (input_grads)
    for (const GraphInput& in : graph.inputs) requires_grad_[in.value] = graph.values[in.value].type.dtype == DType::float32;
  home_slot_.assign(n_values, -1);

  SlotTable<DeviceState> slots(graph, devices_, slot_keys_);
  auto new_slot = [&](int value, int device) { return slots.add(value, device); };
  auto find_slot = [&](int value, int device, const std::string& reader) { return slots.find(value, device, reader); };
  for (const GraphInput& in : graph.inputs) home_slot_[in.value] = new_slot(in.value, 0);

  const int end = static_cast<int>(plan_.steps.size());
  step_action_.assign(plan_.steps.size(), -1);
  copies_after_backward_.resize(plan_.steps.size());
  size_t next_copy = 0;
  for (int i = 0; i < end; ++i) {
    // forward copies before step i (those after the last step, outputs and the loss's target,
    // are not needed: backward reads nothing on the cpu, and loss() copies the target)
    for (; next_copy < plan_.copies.size() && plan_.copies[next_copy].forward && plan_.copies[next_copy].before_step == i;
         ++next_copy) {
      const CopyStep& c = plan_.copies[next_copy];
      Action a;
      a.kind = Action::Kind::copy;
      a.from_device = device_index(c.from);
      a.device = device_index(c.to);
      a.context = layer_context(graph.nodes[plan_.steps[i].node]);
      a.src_slot = find_slot(c.value, a.from_device, "the copy to " + c.to.str());
      a.dst_slot = new_slot(c.value, a.device);
      copies_after_backward_[i].push_back(static_cast<int>(actions_.size()));
      actions_.push_back(std::move(a));
    }
    const OpStep& s = plan_.steps[i];
    const Node& node = graph.nodes[s.node];
    Action a;
    a.step = i;
    a.node = &node;
    a.device = device_index(s.device);
    a.context = layer_context(node);
    bool needs = any_trainable(node.params);
    for (int v : node.inputs) needs = needs || requires_grad_[v];
    requires_grad_[node.output] = needs && graph.values[node.output].type.dtype == DType::float32;
    for (const ParamSpec& p : node.params) {
      // A training forward updates buffers (running statistics) in place: on a GPU, in its
      // copy. That copy goes back to the master after the forward; of a data_parallel
      // block's replicas, replica 0's (as torch's DataParallel keeps).
      if (!p.trainable && s.device != Device::cpu() && (!node.replica || node.replica->replica == 0))
        buffers_to_master_.emplace_back(p.name, s.device);
      a.params.push_back(cache_.weight(p.name, s.device, a.context));
      a.param_grads.push_back(p.trainable ? cache_.gradient(p.name, s.device, a.context) : Tensor());
      if (s.device != Device::cpu() && p.trainable) {
        std::pair<std::string, Device> key{p.name, s.device};
        if (std::find(gpu_param_keys_.begin(), gpu_param_keys_.end(), key) == gpu_param_keys_.end())
          gpu_param_keys_.push_back(key);
      }
    }
    for (int v : node.inputs) a.in_slots.push_back(find_slot(v, a.device, a.context));
    a.out_slot = new_slot(node.output, a.device);
    home_slot_[node.output] = a.out_slot;
    // kernels are made below, on the compute thread
    step_action_[i] = static_cast<int>(actions_.size());
    actions_.push_back(std::move(a));
  }
  make_kernels_on_compute_thread(registry, [&] {
    for (Action& a : actions_)
      if (a.kind == Action::Kind::op && !a.node->schema->is_view)
        a.kernel = make_cpu_kernel(*devices_[a.device]->context, graph, *a.node, shapes_, a.params);
  });
  for (size_t i = 0; i < actions_.size(); ++i)
    if (actions_[i].kind == Action::Kind::op && !actions_[i].node->schema->is_view)
      replica_groups_.add(static_cast<int>(i), *actions_[i].node, devices_[actions_[i].device]->queue);
  for (Action& a : actions_) {
    if (a.kind != Action::Kind::op || !a.kernel) continue;
    for (size_t k = 0; k < a.node->params.size(); ++k) {
      TouchedRows* rows = a.node->params[k].trainable ? cache_.gradient_rows(a.node->params[k].name, plan_.steps[a.step].device) : nullptr;
      const bool recorded = rows && a.kernel->records_touched_rows(k);
      a.recorded_rows.push_back(recorded ? rows : nullptr);
      if (rows && !recorded) a.unrecorded_rows.push_back(rows);
    }
  }
  // A GPU parameter's gradient is complete after the backward of the first step that uses
  // it (backward runs the steps in reverse): its reduction into the master can start then.
  gradients_done_after_.resize(plan_.steps.size());
  for (const auto& key : gpu_param_keys_)
    for (int i = 0; i < end; ++i) {
      const Action& a = actions_[step_action_[i]];
      const Node& node = *a.node;
      bool uses = devices_[a.device]->device == key.second &&
                  std::any_of(node.params.begin(), node.params.end(), [&](const ParamSpec& p) { return p.name == key.first; });
      if (uses) {
        gradients_done_after_[i].push_back(key);
        break;
      }
    }
  // the gradients go back in the reverse order of the copies
  for (auto& copies : copies_after_backward_) std::reverse(copies.begin(), copies.end());

  // Release after the last forward reader what no backward reads.
  const size_t n_slots = slot_keys_.size();
  std::vector<bool> read_in_backward(n_slots, false);
  for (int v : kept)
    if (home_slot_[v] >= 0) read_in_backward[home_slot_[v]] = true;
  if (graph.parallel_loss)  // what the replicas' losses score
    for (const ParallelLoss::Part& part : graph.parallel_loss->parts) read_in_backward[home_slot_[part.value]] = true;
  for (const GraphOutput& out : graph.outputs)
    if (home_slot_[out.value] >= 0) read_in_backward[home_slot_[out.value]] = true;
  std::vector<int> last_reader(n_slots, -1);
  for (size_t i = 0; i < actions_.size(); ++i) {
    const Action& a = actions_[i];
    if (a.kind == Action::Kind::copy) {
      last_reader[a.src_slot] = static_cast<int>(i);
      last_reader[a.dst_slot] = static_cast<int>(i);
      continue;
    }
    last_reader[a.out_slot] = static_cast<int>(i);
    for (size_t k = 0; k < a.in_slots.size(); ++k) {
      last_reader[a.in_slots[k]] = static_cast<int>(i);
      if (a.kernel && a.kernel->backward_reads_input(k)) read_in_backward[a.in_slots[k]] = true;
    }
    if (a.kernel && a.kernel->backward_reads_output()) read_in_backward[a.out_slot] = true;
  }
  release_after_forward_.resize(actions_.size());
  for (size_t s = 0; s < n_slots; ++s)
    if (!read_in_backward[s] && last_reader[s] >= 0) release_after_forward_[last_reader[s]].push_back(static_cast<int>(s));

  values_.resize(n_slots);
  grads_.resize(n_slots);
  grad_ready_.assign(n_slots, false);
}

MultiDeviceTraining::~MultiDeviceTraining() { clear(); }

void MultiDeviceTraining::clear() noexcept {
  drain_devices(devices_);  // an error is already on its way from the call that failed
  for (Tensor& t : values_) t = Tensor();
  for (Tensor& t : grads_) t = Tensor();
}

int64_t MultiDeviceTraining::primitives_created() const {
  int64_t n = 0;
  for (const auto& d : devices_)
    if (d->own_context) n += d->own_context->primitives_created();
  return n;
}

template <typename F>
void MultiDeviceTraining::on_device(int device, F&& work, std::shared_ptr<TaskGroup> group) {
  devices_[device]->queue->submit(std::forward<F>(work), std::move(group));
  if (lockstep_) synchronize_devices(devices_);
}

void MultiDeviceTraining::add_on_device(int device, const Tensor& into, const Tensor& from) {
  TraceLabel label("gradient accumulated");
  on_device(device, [into, from]() mutable { cpu::add_into(into, from); });
}

Tensor MultiDeviceTraining::allocate_on(int device, const Shape& shape, DType dtype, const std::string& context) {
  DeviceState& dev = *devices_[device];
  // The host runs ahead of the queues, and a buffer it has let go of returns to its pool
  // only once its last reader has run: past the memory the step took in lockstep, wait for
  // the queues, so that running ahead never costs memory.
  if (!lockstep_ && dev.allocator->current_bytes() + static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype) > dev.budget)
    synchronize_devices(devices_);
  return allocate(shape, dtype, *dev.allocator, context);
}

Tensor MultiDeviceTraining::copy_between(const Tensor& src, int from, int to, const std::string& context) {
  DeviceState& f = *devices_[from];
  DeviceState& t = *devices_[to];
  Tensor dst = allocate_on(to, src.shape(), src.dtype(), context);
  size_t bytes = src.nbytes();
  // On a GPU's compute queue (SimGpu::activation_stream), after the source device's work
  // so far (the writer among it), before the destination's next kernels.
  SimGpu* side = f.gpu ? f.gpu : t.gpu;
  TANDEM_ASSERT(side, "a copy from the cpu to the cpu");
  const SimGpu::Stream stream = SimGpu::activation_stream;
  SimQueue& engine = side->queue(stream);
  TraceLabel label(context, "copy");
  if (&engine != f.queue) engine.submit_wait(f.queue->record());
  if (!f.gpu) {
    t.gpu->copy_from_host(buffer_of(dst), buffer_of(src), bytes, stream);
    f.bytes_out += bytes;
    ++f.copies_out;
  } else if (!t.gpu) {
    f.gpu->copy_to_host(buffer_of(dst), buffer_of(src), bytes, stream);
    t.bytes_in += bytes;
    ++t.copies_in;
  } else {
    f.gpu->copy_peer(*t.gpu, buffer_of(dst), buffer_of(src), bytes, stream);
  }
  if (&engine != t.queue) t.queue->submit_wait(engine.record());
  if (lockstep_) synchronize_devices(devices_);
  return dst;
}

void MultiDeviceTraining::forward(const std::vector<Tensor>& inputs, uint64_t seed, uint64_t params_version,
                                  bool training) {
  start_device_reports(devices_);
  DeviceParameterCache::Traffic uploaded = cache_.refresh(params_version);  // counted: real traffic
  devices_[0]->bytes_out += uploaded.bytes;
  devices_[0]->copies_out += uploaded.copies;
  seed_ = seed;
  training_ = training;
  params_version_ = params_version;
  try {
    for (Tensor& t : values_) t = Tensor();
    for (size_t i = 0; i < graph_.inputs.size(); ++i) values_[home_slot_[graph_.inputs[i].value]] = inputs[i];
    replica_groups_.start_pass();
    for (size_t i = 0; i < actions_.size(); ++i) {
      Action& a = actions_[i];
      if (a.kind == Action::Kind::copy) {
        values_[a.dst_slot] = copy_between(values_[a.src_slot], a.from_device, a.device, a.context);
      } else if (!a.kernel) {
        values_[a.out_slot] = values_[a.in_slots[0]].view(shapes_[a.node->output]);
      } else {
        const Node& node = *a.node;
        std::vector<Tensor> inputs;
        for (int s : a.in_slots) inputs.push_back(values_[s]);
        Tensor out = allocate_on(a.device, shapes_[node.output], graph_.values[node.output].type.dtype, a.context);
        values_[a.out_slot] = out;
        uint64_t step_seed = seed * 0x9e3779b97f4a7c15ULL + static_cast<uint64_t>(a.step);
        TraceLabel label(a.context, "forward");
        on_device(
            a.device,
            [&a, inputs = std::move(inputs), out, training, step_seed, params_version]() mutable {
              forward_naming_layer(*a.kernel, KernelArgs{inputs, a.params, {&out, 1}, training, step_seed, params_version},
                                   a.context);
            },
            replica_groups_.group_of(static_cast<int>(i)));
      }
      for (int s : release_after_forward_[i]) values_[s] = Tensor();
    }
    std::vector<std::pair<Tensor, Tensor>> updated_buffers;  // (master, its copy on the host)
    if (training)
      for (const auto& [name, device] : buffers_to_master_) {
        Tensor on_device = cache_.weight(name, device, "");
        Tensor host = Tensor::empty(on_device.shape(), on_device.dtype());
        TraceLabel label(name, "buffer to the master");
        devices_[plan_device_index(devices_, device)]->gpu->copy_to_host(buffer_of(host), buffer_of(on_device),
                                                                          on_device.nbytes());
        updated_buffers.emplace_back(cache_.master(name), host);
        devices_[0]->bytes_in += on_device.nbytes();
        ++devices_[0]->copies_in;
      }
    synchronize_devices(devices_);  // the caller may read the outputs
    // Only now, with every device's upload of the old values done, the master changes; the
    // other devices' copies are stale and go up again before their next use.
    for (auto& [master, host] : updated_buffers) std::memcpy(master.raw_data(), host.raw_data(), host.nbytes());
    for (const auto& [name, device] : buffers_to_master_) cache_.invalidate(name);
  } catch (...) {
    clear();
    throw;
  }
  finish_report();
}

LossValue MultiDeviceTraining::loss(const LossSpec& spec, const Tensor& target, bool with_gradient) {
  if (graph_.parallel_loss) return parallel_loss(spec, target, with_gradient);
  loss_seeds_ = {spec.input};
  const int slot = home_slot_[spec.input];
  TANDEM_ASSERT(slot >= 0, "the loss's input is not produced");
  const int device = slot_keys_[slot].second;
  const std::string context = "the loss (" + spec.op + ")";
  Tensor on_device_target = device == 0 ? target : copy_between(target, 0, device, context);
  Tensor* grad = nullptr;
  if (with_gradient) {
    TANDEM_ASSERT(requires_grad_[spec.input], "the loss's input has no gradient");
    grads_[slot] = allocate_on(device, shapes_[spec.input], DType::float32, context);
    grad = &grads_[slot];
  }
  LossValue value;
  try {
    // the host needs the value: it waits, so the task may use what lives here
    TraceLabel label(context);
    devices_[device]->queue->submit([&] { value = compute_loss(spec, values_[slot], on_device_target, grad); });
    synchronize_devices(devices_);
  } catch (...) {
    clear();
    throw;
  }
  finish_report();
  return value;
}

LossValue MultiDeviceTraining::parallel_loss(const LossSpec& spec, const Tensor& target, bool with_gradient) {
  const ParallelLoss& parallel = *graph_.parallel_loss;
  const size_t n = parallel.parts.size();
  // The target's rows go along the scatter dim when it has one of the input's extent there
  // (sequence-first [T, N] targets), else along dim 0 ([N] class indices).
  const int64_t rows = parallel.parts.back().start + parallel.parts.back().length;
  const int64_t dim = target.shape().size() > static_cast<size_t>(parallel.dim) && target.shape()[parallel.dim] == rows
                          ? parallel.dim
                          : 0;
  TANDEM_ASSERT(target.shape()[dim] == rows, "the target has no dim the replicas' chunks split");
  std::vector<LossValue> values(n);
  std::vector<int> slots(n), devices(n);
  loss_seeds_.clear();
  try {
    for (size_t k = 0; k < n; ++k) {
      const ParallelLoss::Part& part = parallel.parts[k];
      slots[k] = home_slot_[part.value];
      TANDEM_ASSERT(slots[k] >= 0, "a replica's share of the loss's input is not produced");
      devices[k] = slot_keys_[slots[k]].second;
      const std::string context = "the parallel loss (" + spec.op + ") on " + devices_[devices[k]]->device.str();
      Tensor rows_k = narrow_copy(target, dim, part.start, part.length);
      Tensor on_device = devices[k] == 0 ? rows_k : copy_between(rows_k, 0, devices[k], context);
      Tensor grad;
      if (with_gradient) {
        grad = allocate_on(devices[k], shapes_[part.value], DType::float32, context);
        grads_[slots[k]] = grad;
        loss_seeds_.push_back(part.value);
      }
      // the host waits below before it reads `values`
      TraceLabel label(context);
      devices_[devices[k]]->queue->submit([&spec, &value = values[k], input = values_[slots[k]], on_device, grad]() mutable {
        value = compute_loss(spec, input, on_device, grad.defined() ? &grad : nullptr);
      });
    }
    synchronize_devices(devices_);  // every replica's loss ran on its own device, together
  } catch (...) {
    clear();
    throw;
  }
  // Only scalars travelled; the whole batch's loss is the replicas' weighted by what each
  // counted (rows, or targets not ignored), as one loss over the batch would average.
  LossValue total;
  for (const LossValue& v : values) {  // the replicas' chunks in batch order
    total.counted += v.counted;
    total.correct += v.correct;
    total.scores.insert(total.scores.end(), v.scores.begin(), v.scores.end());
    total.labels.insert(total.labels.end(), v.labels.begin(), v.labels.end());
  }
  const bool mean = spec.reduction == "mean";
  for (size_t k = 0; k < n; ++k) {
    const LossValue& v = values[k];
    if (v.counted > 0) total.loss += mean ? v.loss * static_cast<double>(v.counted) / static_cast<double>(total.counted) : v.loss;
    if (!with_gradient || !mean) continue;
    // each replica's gradient was of its own mean: rescale it to the batch's
    const float scale = total.counted > 0 ? static_cast<float>(static_cast<double>(v.counted) / total.counted) : 0.0f;
    TraceLabel label("the parallel loss's gradient rescaled to the batch's mean");
    on_device(devices[k], [grad = grads_[slots[k]], scale]() mutable {
      float* g = grad.data<float>();
      const int64_t size = grad.numel();
      for (int64_t i = 0; i < size; ++i) g[i] = scale == 0.0f ? 0.0f : g[i] * scale;
    });
  }
  if (total.counted == 0 && mean) total.loss = std::numeric_limits<double>::quiet_NaN();  // as torch: 0/0
  finish_report();
  return total;
}

void MultiDeviceTraining::seed_gradient(int value, const Tensor& grad) {
  const int slot = home_slot_[value];
  TANDEM_ASSERT(slot >= 0 && requires_grad_[value], "tensor '" + graph_.values[value].name + "' has no gradient");
  const int device = slot_keys_[slot].second;
  if (device == 0) {
    grads_[slot] = Tensor::empty(shapes_[value], DType::float32);
    std::memcpy(grads_[slot].raw_data(), grad.raw_data(), grads_[slot].nbytes());
  } else {
    grads_[slot] = copy_between(grad, 0, device, "the gradient of '" + graph_.values[value].name + "'");
  }
}

void MultiDeviceTraining::backward(const std::vector<int>& seeded) {
  std::fill(grad_ready_.begin(), grad_ready_.end(), false);
  for (int v : seeded) grad_ready_[home_slot_[v]] = true;
  for (size_t s = 0; s < grads_.size(); ++s)
    if (!grad_ready_[s]) grads_[s] = Tensor();
  try {
    cache_.zero_gradients(gpu_param_keys_);
    std::map<Device, GradientBucket> buckets;
    auto reduce = [&](GradientBucket& bucket) {
      if (bucket.keys.empty()) return;
      DeviceParameterCache::Traffic downloaded = cache_.add_gradients_to_host(bucket.keys);
      devices_[0]->bytes_in += downloaded.bytes;  // the cpu's side of the GPUs' copies
      devices_[0]->copies_in += downloaded.copies;
      bucket = GradientBucket{};
    };
    replica_groups_.start_pass();
    for (size_t i = plan_.steps.size(); i-- > 0;) {
      Action& a = actions_[step_action_[i]];
      const Node& node = *a.node;
      const int out = a.out_slot;
      if (!requires_grad_[node.output] || !grad_ready_[out]) {
        values_[out] = Tensor();
      } else if (!a.kernel) {  // a view: the gradient is the output's, reshaped
        int in = a.in_slots[0];
        if (requires_grad_[slot_keys_[in].first]) {
          Tensor g = grads_[out].view(shapes_[slot_keys_[in].first]);
          if (grad_ready_[in]) add_on_device(a.device, grads_[in], g);
          else grads_[in] = g;  // the same storage: no copy
          grad_ready_[in] = true;
        }
        grads_[out] = Tensor();
        values_[out] = Tensor();
      } else {
        std::vector<Tensor> in_values, grad_inputs(a.in_slots.size()), accumulate_into(a.in_slots.size());
        std::vector<bool> written_now(a.in_slots.size(), false);
        for (size_t k = 0; k < a.in_slots.size(); ++k) {
          int s = a.in_slots[k];
          int v = slot_keys_[s].first;
          in_values.push_back(values_[s]);
          if (!requires_grad_[v]) continue;
          bool taken = grad_ready_[s];
          for (size_t j = 0; j < k; ++j) taken = taken || (written_now[j] && a.in_slots[j] == s);
          if (taken) {  // a gradient is there already: compute into a fresh one, then add
            grad_inputs[k] = allocate_on(a.device, shapes_[v], DType::float32, a.context);
            accumulate_into[k] = grads_[s];
          } else {
            grads_[s] = allocate_on(a.device, shapes_[v], DType::float32, a.context);
            grad_inputs[k] = grads_[s];
            written_now[k] = true;
          }
        }
        uint64_t step_seed = seed_ * 0x9e3779b97f4a7c15ULL + static_cast<uint64_t>(a.step);
        TraceLabel label(a.context, "backward");
        on_device(a.device, [&a, in_values = std::move(in_values), out_value = values_[out], out_grad = grads_[out],
                             grad_inputs, accumulate_into = std::move(accumulate_into), training = training_,
                             step_seed, version = params_version_]() mutable {
          BackwardArgs args{in_values,   a.params, {&out_value, 1}, {&out_grad, 1}, grad_inputs,
                            a.param_grads, training, step_seed,     version, a.recorded_rows};
          for (TouchedRows* rows : a.unrecorded_rows) rows->mark_all();  // first: a backward may throw
          backward_naming_layer(*a.kernel, args, a.context);
          for (size_t k = 0; k < accumulate_into.size(); ++k)
            if (accumulate_into[k].defined()) cpu::add_into(accumulate_into[k], grad_inputs[k]);
        }, replica_groups_.group_of(step_action_[i]));
        for (size_t k = 0; k < a.in_slots.size(); ++k)
          if (grad_inputs[k].defined()) grad_ready_[a.in_slots[k]] = true;
        grads_[out] = Tensor();
        values_[out] = Tensor();
      }
      // parameter gradients complete now go to the master, a bucket per device at a time,
      // overlapped with the rest of backward
      for (const auto& key : gradients_done_after_[i]) {
        GradientBucket& bucket = buckets[key.second];
        bucket.keys.push_back(key);
        bucket.bytes += cache_.gradient(key.first, key.second, "").nbytes();
        if (bucket.bytes >= gradient_bucket_bytes) reduce(bucket);
      }
      // every reader of these copies has run its backward: their gradients go back
      for (int c : copies_after_backward_[i]) {
        const Action& copy = actions_[c];
        const int dst = copy.dst_slot, src = copy.src_slot;
        if (requires_grad_[slot_keys_[dst].first] && grad_ready_[dst]) {
          Tensor g = copy_between(grads_[dst], copy.device, copy.from_device,
                                  "the gradient of '" + graph_.values[slot_keys_[dst].first].name + "'");
          if (grad_ready_[src]) add_on_device(copy.from_device, grads_[src], g);
          else grads_[src] = std::move(g);
          grad_ready_[src] = true;
        }
        grads_[dst] = Tensor();
        values_[dst] = Tensor();
      }
    }
    for (auto& [device, bucket] : buckets) reduce(bucket);
    synchronize_devices(devices_);  // the optimizer reads the gradients on the host
    if (lockstep_) {  // the first step, run in lockstep, sets how far later ones may run ahead
      for (const auto& d : devices_) d->budget = std::max(d->budget, d->allocator->peak_bytes());
      lockstep_ = false;
    }
  } catch (...) {
    clear();
    throw;
  }
  for (Tensor& t : values_) t = Tensor();
  for (size_t s = 0; s < grads_.size(); ++s)  // keep the graph inputs' gradients only
    if (slot_keys_[s].second != 0 || graph_.values[slot_keys_[s].first].producer >= 0) grads_[s] = Tensor();
  finish_report();
}

Tensor MultiDeviceTraining::input_gradient(size_t index) const {
  int v = graph_.inputs.at(index).value;
  if (!requires_grad_[v]) return Tensor();
  int s = home_slot_[v];
  if (!grad_ready_[s]) return Tensor::zeros(shapes_[v], DType::float32);
  return grads_[s];
}

void MultiDeviceTraining::finish_report() { report_ = device_reports(devices_); }

}  // namespace tandem
