#include "runtime/multi_device_training.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "backends/trace.h"
#include "runtime/trace_args.h"
#include "core/error.h"
#include "runtime/device_registry.h"
#include "runtime/node_kernels.h"
#include "runtime/placed_schedule.h"

namespace tandem {
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
                                         DeviceParameterCache& cache, DeviceRegistry& registry, bool input_grads,
                                         const std::vector<int>& kept, bool hold_parameters)
    : plan_(plan),
      graph_(executed_graph(plan_, given)),  // replicated data_parallel blocks: the plan keeps it
      cache_(cache),
      shapes_(concrete_shapes(graph_, bindings)) {
  const Graph& graph = graph_;
  const size_t n_values = graph.values.size();
  // A training forward updates buffers (running statistics) in place: on a GPU, in its
  // copy. That copy goes back to the master after the forward; of a data_parallel block's
  // replicas, replica 0's (as torch's DataParallel keeps).
  for (const OpStep& s : plan_.steps) {
    const Node& node = graph.nodes[s.node];
    for (const ParamSpec& p : node.params)
      if (!p.trainable && s.device != Device::cpu() && (!node.replica || node.replica->replica == 0))
        buffers_to_master_.emplace_back(p.name, s.device);
  }
  schedule_ = std::make_unique<PlacedSchedule>(
      graph, plan_, shapes_, registry, /*trailing_copies=*/false,  // outputs and the loss's target: loss() copies it
      [&](const ParamSpec& p, Device device, const std::string& context) { return cache_.weight(p.name, device, context); });
  PlacedSchedule& s = *schedule_;

  requires_grad_.assign(n_values, false);
  if (input_grads)
    for (const GraphInput& in : graph.inputs) requires_grad_[in.value] = graph.values[in.value].type.dtype == DType::float32;
  home_slot_.assign(n_values, -1);
  for (size_t i = 0; i < graph.inputs.size(); ++i) home_slot_[graph.inputs[i].value] = s.input_slots[i];
  targets_.resize(s.actions.size());
  const int end = static_cast<int>(plan_.steps.size());
  copies_after_backward_.assign(s.copies_before.begin(), s.copies_before.begin() + end);
  for (int i = 0; i < end; ++i) {
    const int index = s.step_action[i];
    const PlacedAction& a = s.actions[index];
    const Node& node = *a.node;
    const Device device = plan_.steps[i].device;
    home_slot_[node.output] = a.out_slot;
    bool needs = any_trainable(node.params);
    for (int v : node.inputs) needs = needs || requires_grad_[v];
    requires_grad_[node.output] = needs && graph.values[node.output].type.dtype == DType::float32;
    GradientTargets& t = targets_[index];
    for (size_t k = 0; k < node.params.size(); ++k) {
      const ParamSpec& p = node.params[k];
      t.param_grads.push_back(p.trainable ? cache_.gradient(p.name, device, a.context) : Tensor());
      if (device != Device::cpu() && p.trainable) {
        std::pair<std::string, Device> key{p.name, device};
        if (std::find(gpu_param_keys_.begin(), gpu_param_keys_.end(), key) == gpu_param_keys_.end())
          gpu_param_keys_.push_back(key);
      }
      if (!a.kernel) continue;
      TouchedRows* rows = p.trainable ? cache_.gradient_rows(p.name, device) : nullptr;
      const bool recorded = rows && a.kernel->records_touched_rows(k);
      t.recorded_rows.push_back(recorded ? rows : nullptr);
      if (rows && !recorded) t.unrecorded_rows.push_back(rows);
    }
  }
  // A trainable parameter that every layer using it runs on GPUs is held by them (Note
  // [where a master lives]).
  if (hold_parameters) {
    std::map<std::string, bool> on_cpu;
    for (int i = 0; i < end; ++i)
      for (const ParamSpec& p : s.actions[s.step_action[i]].node->params)
        if (p.trainable) on_cpu[p.name] = on_cpu[p.name] || plan_.steps[i].device == Device::cpu();
    for (const auto& key : gpu_param_keys_)
      if (!on_cpu[key.first]) ++replica_count_[key.first];
  }
  // A GPU parameter's gradient is complete after the backward of the first step that uses
  // it (backward runs the steps in reverse): its reduction into the master can start then.
  gradients_done_after_.resize(plan_.steps.size());
  for (const auto& key : gpu_param_keys_)
    for (int i = 0; i < end; ++i) {
      const PlacedAction& a = s.actions[s.step_action[i]];
      const Node& node = *a.node;
      bool uses = s.devices[a.device]->device == key.second &&
                  std::any_of(node.params.begin(), node.params.end(), [&](const ParamSpec& p) { return p.name == key.first; });
      if (uses) {
        gradients_done_after_[i].push_back(key);
        break;
      }
    }
  // the gradients go back in the reverse order of the copies
  for (auto& copies : copies_after_backward_) std::reverse(copies.begin(), copies.end());

  // Release after the last forward reader what no backward reads.
  const size_t n_slots = s.slot_keys.size();
  std::vector<bool> read_in_backward(n_slots, false);
  for (int v : kept)
    if (home_slot_[v] >= 0) read_in_backward[home_slot_[v]] = true;
  if (graph.parallel_loss)  // what the replicas' losses score
    for (const ParallelLoss::Part& part : graph.parallel_loss->parts) read_in_backward[home_slot_[part.value]] = true;
  for (const GraphOutput& out : graph.outputs)
    if (home_slot_[out.value] >= 0) read_in_backward[home_slot_[out.value]] = true;
  std::vector<int> last_reader(n_slots, -1);
  for (size_t i = 0; i < s.actions.size(); ++i) {
    const PlacedAction& a = s.actions[i];
    if (a.kind == PlacedAction::Kind::copy) {
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
  release_after_forward_.resize(s.actions.size());
  for (size_t slot = 0; slot < n_slots; ++slot)
    if (!read_in_backward[slot] && last_reader[slot] >= 0)
      release_after_forward_[last_reader[slot]].push_back(static_cast<int>(slot));

  values_.resize(n_slots);
  grads_.resize(n_slots);
  grad_ready_.assign(n_slots, false);
  budget_.assign(s.devices.size(), 0);
}

MultiDeviceTraining::~MultiDeviceTraining() { clear(); }

void MultiDeviceTraining::clear() noexcept {
  drain_devices(schedule_->devices);  // an error is already on its way from the call that failed
  for (Tensor& t : values_) t = Tensor();
  for (Tensor& t : grads_) t = Tensor();
}

void MultiDeviceTraining::after_submit() {
  if (lockstep_) synchronize_devices(schedule_->devices);
}

void MultiDeviceTraining::add_on_device(int device, const Tensor& into, const Tensor& from) {
  TraceLabel label("gradient accumulated");
  PlanDevice& dev = *schedule_->devices[device];
  dev.backend->accumulate(*dev.compute, into, from);
  after_submit();
}

Tensor MultiDeviceTraining::allocate_on(int device, const Shape& shape, DType dtype, const std::string& context,
                                        Allocator* memory) {
  PlanDevice& dev = *schedule_->devices[device];
  Allocator& allocator = dev.backend->allocator();
  // The host runs ahead of the lanes, and a buffer it has let go of returns to its pool
  // only once its last reader has run: past the memory the step took in lockstep, wait for
  // the lanes, so that running ahead never costs memory.
  if (!lockstep_ && allocator.current_bytes() + static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype) > budget_[device])
    synchronize_devices(schedule_->devices);
  return allocate(shape, dtype, memory ? *memory : allocator, context);
}

Tensor MultiDeviceTraining::copy_between(const Tensor& src, int from, int to, const std::string& context) {
  PlanDevice& f = *schedule_->devices[from];
  PlanDevice& t = *schedule_->devices[to];
  // a GPU's tensor lands on the host in that GPU's host memory (pinned for CUDA): one
  // asynchronous transfer, no staging (PlacedSchedule::allocator_for)
  const bool to_host = t.device == Device::cpu() && f.device != Device::cpu();
  Tensor dst = allocate_on(to, src.shape(), src.dtype(), context, to_host ? &f.backend->host_allocator() : nullptr);
  TraceLabel label(context, "copy");
  TraceArgs args(Trace::active() ? copy_trace_args(f.device, t.device, src) : std::string());
  // after the source device's work so far (the writer among it), before the destination's
  // next kernels
  Lane& lane = queue_copy(f, t, src, dst, f.compute, f.compute->record());
  if (&lane != t.compute) t.compute->wait(lane.record());
  after_submit();
  return dst;
}

void MultiDeviceTraining::forward(const std::vector<Tensor>& inputs, uint64_t seed, uint64_t params_version,
                                  bool training) {
  PlacedSchedule& s = *schedule_;
  start_device_reports(s.devices);
  DeviceParameterCache::Traffic uploaded;  // counted: real traffic
  for (const auto& [name, replicas] : replica_count_) uploaded += cache_.hold(name, params_version);
  uploaded += cache_.refresh(params_version);
  s.devices[0]->counted_here.bytes_out += uploaded.bytes;
  s.devices[0]->counted_here.copies_out += uploaded.copies;
  seed_ = seed;
  training_ = training;
  params_version_ = params_version;
  {  // on an error, every buffer of the step goes back to its pool
    ReleaseOnError release(*this);
    for (Tensor& t : values_) t = Tensor();
    for (size_t i = 0; i < graph_.inputs.size(); ++i) values_[home_slot_[graph_.inputs[i].value]] = inputs[i];
    s.replica_groups.start_pass();
    for (size_t i = 0; i < s.actions.size(); ++i) {
      const PlacedAction& a = s.actions[i];
      if (a.kind == PlacedAction::Kind::copy) {
        values_[a.dst_slot] = copy_between(values_[a.src_slot], a.from_device, a.device, a.context);
      } else if (!a.kernel) {
        values_[a.out_slot] = values_[a.in_slots[0]].view(shapes_[a.node->output]);
      } else {
        const Node& node = *a.node;
        std::vector<Tensor> inputs;
        for (int slot : a.in_slots) inputs.push_back(values_[slot]);
        Tensor out = allocate_on(a.device, shapes_[node.output], graph_.values[node.output].type.dtype, a.context,
                                 &s.allocator_for(a.out_slot, a.device));
        values_[a.out_slot] = out;
        uint64_t step_seed = seed * 0x9e3779b97f4a7c15ULL + static_cast<uint64_t>(a.step);
        TraceLabel label(a.context, "forward");
        TraceArgs args(Trace::active() ? layer_trace_args(node, s.devices[a.device]->device, inputs, out.shape(), out.dtype())
                                       : std::string());
        s.compute_lane(a).submit(
            [&a, inputs = std::move(inputs), out, training, step_seed, params_version]() mutable {
              forward_naming_layer(*a.kernel, KernelArgs{inputs, a.params, {&out, 1}, training, step_seed, params_version},
                                   a.context);
            },
            s.replica_groups.group_of(static_cast<int>(i)));
        after_submit();
      }
      for (int slot : release_after_forward_[i]) values_[slot] = Tensor();
    }
    std::vector<std::pair<Tensor, Tensor>> updated_buffers;  // (master, its copy on the host)
    if (training)
      for (const auto& [name, device] : buffers_to_master_) {
        Tensor on_device = cache_.weight(name, device, "");
        PlanDevice& dev = *s.devices[plan_device_index(s.devices, device)];
        Tensor host = Tensor::empty(on_device.shape(), on_device.dtype(), dev.backend->host_allocator());
        TraceLabel label(name, "buffer to the master");
        queue_copy(dev, *s.devices[0], on_device, host, dev.compute, dev.compute->record());
        updated_buffers.emplace_back(cache_.master(name), host);
      }
    synchronize_devices(s.devices);  // the caller may read the outputs
    // Only now, with every device's upload of the old values done, the master changes; the
    // other devices' copies are stale and go up again before their next use.
    for (auto& [master, host] : updated_buffers) std::memcpy(master.raw_data(), host.raw_data(), host.nbytes());
    for (const auto& [name, device] : buffers_to_master_) cache_.invalidate(name);
  }
  finish_report();
}

LossValue MultiDeviceTraining::loss(const LossSpec& spec, const Tensor& target, bool with_gradient) {
  if (graph_.parallel_loss) return parallel_loss(spec, target, with_gradient);
  PlacedSchedule& s = *schedule_;
  loss_seeds_ = {spec.input};
  const int slot = home_slot_[spec.input];
  TANDEM_ASSERT(slot >= 0, "the loss's input is not produced");
  const int device = s.slot_keys[slot].second;
  const std::string context = "the loss (" + spec.op + ")";
  LossValue value;
  {  // on an error, every buffer of the step goes back to its pool
    ReleaseOnError release(*this);
    Tensor on_device_target = device == 0 ? target : copy_between(target, 0, device, context);
    Tensor grad;
    if (with_gradient) {
      TANDEM_ASSERT(requires_grad_[spec.input], "the loss's input has no gradient");
      grads_[slot] = allocate_on(device, shapes_[spec.input], DType::float32, context);
      grad = grads_[slot];
    }
    // the host needs the value: it waits, so `value` may live here
    TraceLabel label(context);
    PlanDevice& dev = *s.devices[device];
    dev.backend->loss(*dev.compute, spec, values_[slot], on_device_target, grad, &value);
    synchronize_devices(s.devices);
  }
  finish_report();
  return value;
}

LossValue MultiDeviceTraining::parallel_loss(const LossSpec& spec, const Tensor& target, bool with_gradient) {
  PlacedSchedule& s = *schedule_;
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
  {  // on an error, every buffer of the step goes back to its pool
    ReleaseOnError release(*this);
    for (size_t k = 0; k < n; ++k) {
      const ParallelLoss::Part& part = parallel.parts[k];
      slots[k] = home_slot_[part.value];
      TANDEM_ASSERT(slots[k] >= 0, "a replica's share of the loss's input is not produced");
      devices[k] = s.slot_keys[slots[k]].second;
      PlanDevice& dev = *s.devices[devices[k]];
      const std::string context = "the parallel loss (" + spec.op + ") on " + dev.device.str();
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
      dev.backend->loss(*dev.compute, spec, values_[slots[k]], on_device, grad, &values[k]);
    }
    synchronize_devices(s.devices);  // every replica's loss ran on its own device, together
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
    PlanDevice& dev = *s.devices[devices[k]];
    dev.backend->scale(*dev.compute, grads_[slots[k]], scale);
    after_submit();
  }
  if (total.counted == 0 && mean) total.loss = std::numeric_limits<double>::quiet_NaN();  // as torch: 0/0
  finish_report();
  return total;
}

void MultiDeviceTraining::scale_loss_gradients(float factor) {
  PlacedSchedule& s = *schedule_;
  for (int value : loss_seeds_) {
    const int slot = home_slot_[value];
    PlanDevice& dev = *s.devices[s.slot_keys[slot].second];
    TraceLabel label("the loss's gradient scaled (fp16 loss scaling)");
    dev.backend->scale(*dev.compute, grads_[slot], factor);
    after_submit();
  }
}

void MultiDeviceTraining::seed_gradient(int value, const Tensor& grad) {
  const int slot = home_slot_[value];
  TANDEM_ASSERT(slot >= 0 && requires_grad_[value], "tensor '" + graph_.values[value].name + "' has no gradient");
  const int device = schedule_->slot_keys[slot].second;
  if (device == 0) {
    grads_[slot] = Tensor::empty(shapes_[value], DType::float32);
    std::memcpy(grads_[slot].raw_data(), grad.raw_data(), grads_[slot].nbytes());
  } else {
    grads_[slot] = copy_between(grad, 0, device, "the gradient of '" + graph_.values[value].name + "'");
  }
}

void MultiDeviceTraining::backward(const std::vector<int>& seeded, const GradientReady* ready) {
  PlacedSchedule& s = *schedule_;
  const auto& slot_keys = s.slot_keys;
  std::fill(grad_ready_.begin(), grad_ready_.end(), false);
  for (int v : seeded) grad_ready_[home_slot_[v]] = true;
  for (size_t slot = 0; slot < grads_.size(); ++slot)
    if (!grad_ready_[slot]) grads_[slot] = Tensor();
  {  // on an error, every buffer of the step goes back to its pool
    ReleaseOnError release(*this);
    cache_.zero_gradients(gpu_param_keys_);
    std::map<Device, GradientBucket> buckets;
    std::map<std::string, int> replicas_done;  // parameters the GPUs hold: their replicas complete so far
    auto reduce = [&](GradientBucket& bucket) {
      if (bucket.keys.empty()) return;
      DeviceParameterCache::Traffic downloaded = cache_.add_gradients_to_host(bucket.keys);
      s.devices[0]->counted_here.bytes_in += downloaded.bytes;  // the cpu's side of the GPUs' copies
      s.devices[0]->counted_here.copies_in += downloaded.copies;
      bucket = GradientBucket{};
    };
    s.replica_groups.start_pass();
    for (size_t i = plan_.steps.size(); i-- > 0;) {
      const int index = s.step_action[i];
      const PlacedAction& a = s.actions[index];
      GradientTargets& targets = targets_[index];
      PlanDevice& dev = *s.devices[a.device];
      const Node& node = *a.node;
      const int out = a.out_slot;
      if (!requires_grad_[node.output] || !grad_ready_[out]) {
        values_[out] = Tensor();
      } else if (!a.kernel) {  // a view: the gradient is the output's, reshaped
        int in = a.in_slots[0];
        if (requires_grad_[slot_keys[in].first]) {
          Tensor g = grads_[out].view(shapes_[slot_keys[in].first]);
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
          int slot = a.in_slots[k];
          int v = slot_keys[slot].first;
          in_values.push_back(values_[slot]);
          if (!requires_grad_[v]) continue;
          bool taken = grad_ready_[slot];
          for (size_t j = 0; j < k; ++j) taken = taken || (written_now[j] && a.in_slots[j] == slot);
          if (taken) {  // a gradient is there already: compute into a fresh one, then add
            grad_inputs[k] = allocate_on(a.device, shapes_[v], DType::float32, a.context + " backward");
            accumulate_into[k] = grads_[slot];
          } else {
            // in host memory a GPU copies fastest when it goes up to one (the reverse of
            // the forward copy that brought the value down)
            grads_[slot] = allocate_on(a.device, shapes_[v], DType::float32, a.context + " backward",
                                       &schedule_->allocator_for(slot, a.device));
            grad_inputs[k] = grads_[slot];
            written_now[k] = true;
          }
        }
        uint64_t step_seed = seed_ * 0x9e3779b97f4a7c15ULL + static_cast<uint64_t>(a.step);
        {
          TraceLabel label(a.context, "backward");
          TraceArgs args(Trace::active() ? layer_trace_args(*a.node, dev.device, in_values, shapes_[node.output],
                                                            DType::float32)
                                         : std::string());
          dev.compute->submit(
              [&a, &targets, in_values = std::move(in_values), out_value = values_[out], out_grad = grads_[out],
               grad_inputs, training = training_, step_seed, version = params_version_]() mutable {
                BackwardArgs args{in_values,           a.params, {&out_value, 1}, {&out_grad, 1},     grad_inputs,
                                  targets.param_grads, training, step_seed,       version, targets.recorded_rows};
                // first: a backward may throw. Only cpu layers have touched rows, and the
                // cpu's lane runs on the host.
                for (TouchedRows* rows : targets.unrecorded_rows) rows->mark_all();
                backward_naming_layer(*a.kernel, args, a.context);
              },
              s.replica_groups.group_of(index));
        }
        for (size_t k = 0; k < accumulate_into.size(); ++k)
          if (accumulate_into[k].defined()) {
            TraceLabel label(a.context, "gradient accumulated");
            dev.backend->accumulate(*dev.compute, accumulate_into[k], grad_inputs[k]);
          }
        after_submit();
        for (size_t k = 0; k < a.in_slots.size(); ++k)
          if (grad_inputs[k].defined()) grad_ready_[a.in_slots[k]] = true;
        grads_[out] = Tensor();
        values_[out] = Tensor();
      }
      // parameter gradients complete now go to the master, a bucket per device at a time,
      // overlapped with the rest of backward
      for (const auto& key : gradients_done_after_[i]) {
        if (cache_.held(key.first)) {  // all-reduced among the GPUs that hold it
          if (++replicas_done[key.first] == replica_count_.at(key.first)) {
            cache_.all_reduce_gradients(key.first);
            if (ready) (*ready)(key.first);  // over processes: queued behind the sum among the GPUs
          }
          continue;
        }
        GradientBucket& bucket = buckets[key.second];
        bucket.keys.push_back(key);
        bucket.bytes += cache_.gradient(key.first, key.second, "").nbytes();
        if (bucket.bytes >= gradient_bucket_bytes) reduce(bucket);
      }
      // every reader of these copies has run its backward: their gradients go back
      for (int c : copies_after_backward_[i]) {
        const PlacedAction& copy = s.actions[c];
        const int dst = copy.dst_slot, src = copy.src_slot;
        if (requires_grad_[slot_keys[dst].first] && grad_ready_[dst]) {
          Tensor g = copy_between(grads_[dst], copy.device, copy.from_device,
                                  "the gradient of '" + graph_.values[slot_keys[dst].first].name + "'");
          if (grad_ready_[src]) add_on_device(copy.from_device, grads_[src], g);
          else grads_[src] = std::move(g);
          grad_ready_[src] = true;
        }
        grads_[dst] = Tensor();
        values_[dst] = Tensor();
      }
    }
    for (auto& [device, bucket] : buckets) reduce(bucket);
    synchronize_devices(s.devices);  // the optimizer reads the gradients on the host
    if (lockstep_) {  // the first step, run in lockstep, sets how far later ones may run ahead
      for (size_t d = 0; d < s.devices.size(); ++d)
        budget_[d] = std::max(budget_[d], s.devices[d]->backend->allocator().peak_bytes());
      lockstep_ = false;
    }
  }
  for (Tensor& t : values_) t = Tensor();
  for (size_t slot = 0; slot < grads_.size(); ++slot)  // keep the graph inputs' gradients only
    if (slot_keys[slot].second != 0 || graph_.values[slot_keys[slot].first].producer >= 0) grads_[slot] = Tensor();
  finish_report();
}

Tensor MultiDeviceTraining::input_gradient(size_t index) const {
  int v = graph_.inputs.at(index).value;
  if (!requires_grad_[v]) return Tensor();
  int slot = home_slot_[v];
  if (!grad_ready_[slot]) return Tensor::zeros(shapes_[v], DType::float32);
  return grads_[slot];
}

void MultiDeviceTraining::finish_report() { report_ = device_reports(schedule_->devices); }

}  // namespace tandem
