#include "runtime/exec/training_executor.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <set>

#include "backends/trace.h"
#include "core/error.h"
#include "runtime/devices/device_registry.h"
#include "runtime/exec/gradient_return.h"
#include "runtime/exec/layer_seed.h"
#include "runtime/exec/liveness.h"
#include "runtime/exec/node_kernels.h"
#include "runtime/exec/parallel_loss.h"
#include "runtime/exec/pipeline.h"
#include "runtime/exec/schedule.h"
#include "runtime/exec/trace_args.h"

namespace tandem {

TrainingExecutor::TrainingExecutor(const Graph& given, const Plan& plan, const Bindings& bindings,
                                   DeviceParameterCache& cache, DeviceRegistry& registry, bool input_grads,
                                   const std::vector<int>& kept, bool hold_parameters)
    : plan_(plan),
      graph_(executed_graph(plan_, given)),  // replicated data_parallel blocks: the plan keeps it
      cache_(cache),
      shapes_(concrete_shapes(graph_, bindings)) {
  const Graph& graph = graph_;
  // A training forward updates buffers (running statistics) in place: on a GPU, in its
  // copy. That copy goes back to the master after the forward; of a data_parallel block's
  // replicas, replica 0's (as torch's DataParallel keeps).
  for (const OpStep& s : plan_.steps) {
    const Node& node = graph.nodes[s.node];
    for (const ParamSpec& p : node.params)
      if (!p.trainable && s.device != Device::cpu() && (!node.replica || node.replica->replica == 0))
        buffers_to_master_.emplace_back(p.name, s.device);
  }
  schedule_ = std::make_unique<Schedule>(
      graph, plan_, shapes_, registry, /*trailing_copies=*/false,  // outputs and the loss's target: loss() copies it
      [&](const ParamSpec& p, Device device, const std::string& context) { return cache_.weight(p.name, device, context); });
  Schedule& s = *schedule_;
  requires_grad_ = values_requiring_grad(graph, s, input_grads);
  targets_.resize(s.actions.size());
  std::map<std::string, int> users;  // steps that use each parameter
  for (const OpStep& step : plan_.steps)
    for (const ParamSpec& p : graph.nodes[step.node].params) ++users[p.name];
  std::set<std::string> used_before;  // parameters an earlier step (in forward order) uses
  for (size_t i = 0; i < plan_.steps.size(); ++i) {
    const int index = s.step_action[i];
    const ScheduleAction& a = s.actions[index];
    const Device device = plan_.steps[i].device;
    GradientTargets& t = targets_[index];
    for (size_t k = 0; k < a.node->params.size(); ++k) {
      const ParamSpec& p = a.node->params[k];
      t.param_grads.push_back(p.trainable ? cache_.gradient(p.name, device, a.context) : Tensor());
      // backward runs the steps in reverse: the first to use a parameter completes its gradient
      if (p.trainable && used_before.insert(p.name).second && device == Device::cpu() && a.kernel) {
        t.completed_on_cpu.push_back(p.name);
        if (k == 0 && users[p.name] == 1 && a.kernel->steps_table_in_backward()) t.steppable_table = p.name;
      }
      if (!a.kernel) continue;
      TouchedRows* rows = p.trainable ? cache_.gradient_rows(p.name, device) : nullptr;
      const bool recorded = rows && a.kernel->records_touched_rows(k);
      t.recorded_rows.push_back(recorded ? rows : nullptr);
      if (rows && !recorded) t.unrecorded_rows.push_back(rows);
    }
  }
  gradient_return_ = std::make_unique<GradientReturn>(s, cache_, hold_parameters);
  // the gradients go back in the reverse order of the copies
  copies_after_backward_.assign(s.copies_before.begin(), s.copies_before.begin() + static_cast<long>(plan_.steps.size()));
  for (auto& copies : copies_after_backward_) std::reverse(copies.begin(), copies.end());

  std::vector<int> kept_slots;
  for (int v : kept) kept_slots.push_back(s.home_slot[v]);
  if (graph.parallel_loss)  // what the replicas' losses score
    for (const ParallelLoss::Part& part : graph.parallel_loss->parts) kept_slots.push_back(s.home_slot[part.value]);
  release_after_forward_ = release_after_forward(graph, s, kept_slots);

  values_.resize(s.slot_keys.size());
  grads_.resize(s.slot_keys.size());
  grad_ready_.assign(s.slot_keys.size(), false);
  budget_.assign(s.devices.size(), 0);
  step_start_.assign(s.devices.size(), 0);
}

TrainingExecutor::~TrainingExecutor() { clear(); }

void TrainingExecutor::clear() noexcept {
  drain_devices(schedule_->devices);  // an error is already on its way from the call that failed
  if (gradient_return_) gradient_return_->abandon();
  ahead_.reset();
  for (Tensor& t : values_) t = Tensor();
  for (Tensor& t : grads_) t = Tensor();
}

void TrainingExecutor::after_submit() {
  if (lockstep_) synchronize_devices(schedule_->devices);
}

Tensor TrainingExecutor::allocate_on(int device, const Shape& shape, DType dtype, const std::string& context,
                                     Allocator* memory, const char* phase) {
  PlanDevice& dev = *schedule_->devices[device];
  Allocator& allocator = dev.backend->allocator();
  // The host runs ahead of the lanes, and a buffer it has let go of returns to its pool
  // only once its last reader has run: past the memory the step took in lockstep (and a
  // GPU's slack below), wait for the lanes, so that running ahead costs little memory.
  // In a pipelined step, the step's growth against the sum of its micro-batches' own.
  const PipelineWindow::Entry* window = window_ ? window_->find(dev.device) : nullptr;
  const size_t start = window ? window->start : step_start_[device], budget = window ? window->budget : budget_[device];
  const size_t bytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
  // A GPU's lanes may hold a quarter more than in lockstep: the buffers whose last reader is
  // still queued. Without it the host stopped at every other layer of backward (5 waits a
  // step on the bench recommender's split) and could not hand the cpu its tables' backward
  // meanwhile. A GPU's planned memory keeps every activation (placement/estimate.cpp), above
  // this; the cpu's estimate is tight, and its lane gets no slack.
  const size_t slack = dev.device == Device::cpu() ? 0 : budget / 4;
  const auto over_budget = [&] {
    const size_t in_use = allocator.current_bytes(), step_use = in_use > start ? in_use - start : 0;
    return step_use + bytes > budget + slack;
  };
  if (!lockstep_ && over_budget()) {
    gradient_return_->announce_submitted();  // what is complete need not wait for the rest
    // This device's own lanes first: its buffers' last readers are mostly there, and the
    // other devices go on (the split's GPU need not wait for the cpu's table backward).
    // Only if that did not free enough, every lane.
    {
      HostSpan span("waiting for memory to return");
      dev.backend->synchronize();
    }
    if (over_budget()) synchronize_devices(schedule_->devices);
  }
  Allocator& from = memory ? *memory : allocator;
  try {
    return Tensor::empty(shape, dtype, from);
  } catch (const UserError&) {
    return allocate(shape, dtype, from, phase ? context + " " + phase : context);  // fails again, named
  }
}

Tensor TrainingExecutor::copy_between(const Tensor& src, int from, int to, const std::string& context) {
  PlanDevice& f = *schedule_->devices[from];
  PlanDevice& t = *schedule_->devices[to];
  // a GPU's tensor lands on the host in that GPU's host memory (pinned for CUDA): one
  // asynchronous transfer, no staging (Schedule::allocator_for)
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

Tensor TrainingExecutor::run_forward_action(size_t i, const char* label, bool training, uint64_t seed,
                                            uint64_t params_version, std::shared_ptr<TaskGroup> group) {
  Schedule& s = *schedule_;
  const ScheduleAction& a = s.actions[i];
  if (a.kind == ScheduleAction::Kind::copy) {
    values_[a.dst_slot] = copy_between(values_[a.src_slot], a.from_device, a.device, a.context);
    return Tensor();
  }
  const Node& node = *a.node;
  if (!a.kernel) {
    values_[a.out_slot] = values_[a.in_slots[0]].view(shapes_[node.output]);
    return Tensor();
  }
  std::vector<Tensor> inputs;
  inputs.reserve(a.in_slots.size());
  for (int slot : a.in_slots) inputs.push_back(values_[slot]);
  Tensor out = allocate_on(a.device, shapes_[node.output], graph_.values[node.output].type.dtype, a.context,
                           &s.allocator_for(a.out_slot, a.device));
  values_[a.out_slot] = out;
  TraceLabel trace_label(a.context, label);
  TraceArgs args(Trace::active() ? layer_trace_args(node, s.devices[a.device]->device, inputs, out.shape(), out.dtype())
                                 : std::string());
  s.compute_lane(a).submit(
      [&a, inputs = std::move(inputs), out, training, seed, params_version]() mutable {
        forward_naming_layer(*a.kernel, KernelArgs{inputs, a.params, {&out, 1}, training, seed, params_version},
                             a.context);
      },
      std::move(group));
  after_submit();
  return out;
}

void TrainingExecutor::forward(const std::vector<Tensor>& inputs, uint64_t seed, uint64_t params_version,
                               bool training) {
  Schedule& s = *schedule_;
  if (!window_) begin_report();
  for (size_t d = 0; d < s.devices.size(); ++d) step_start_[d] = s.devices[d]->backend->allocator().current_bytes();
  DeviceParameterCache::Traffic uploaded;  // counted: real traffic
  for (const auto& [name, replicas] : gradient_return_->held_replicas()) uploaded += cache_.hold(name, params_version);
  uploaded += cache_.refresh(params_version);
  s.devices[0]->counted_here.bytes_out += uploaded.bytes;
  s.devices[0]->counted_here.copies_out += uploaded.copies;
  seed_ = seed;
  training_ = training;
  params_version_ = params_version;
  // what look_ahead() submitted of these inputs' forward is done (Note [the next batch ahead])
  std::vector<bool> done_ahead;
  if (training && ahead_for(inputs, params_version)) done_ahead = std::move(ahead_->done);
  ahead_.reset();
  {  // on an error, every buffer of the step goes back to its pool
    ReleaseOnError release(*this);
    if (done_ahead.empty()) {
      for (Tensor& t : values_) t = Tensor();
      for (size_t i = 0; i < graph_.inputs.size(); ++i) values_[s.input_slots[i]] = inputs[i];
    }
    s.replica_groups.start_pass();
    for (size_t i = 0; i < s.actions.size(); ++i) {
      const ScheduleAction& a = s.actions[i];
      if (!done_ahead.empty() && done_ahead[i]) {
        // run ahead, which let go of what it alone read; what a reader here needed goes now
        for (int slot : release_after_forward_[i]) values_[slot] = Tensor();
        continue;
      }
      run_forward_action(i, "forward", training, layer_seed(seed, a.step), params_version,
                         a.kind == ScheduleAction::Kind::op && a.kernel ? s.replica_groups.group_of(static_cast<int>(i))
                                                                        : nullptr);
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
    if (updated_buffers.empty()) {
      synchronize_unless_pipelined();  // the caller may read the outputs
    } else {
      synchronize_devices(s.devices);
      // Only now, with every device's upload of the old values done, the master changes; the
      // other devices' copies are stale and go up again before their next use.
      for (auto& [master, host] : updated_buffers) std::memcpy(master.raw_data(), host.raw_data(), host.nbytes());
      for (const auto& [name, device] : buffers_to_master_) cache_.invalidate(name);
    }
  }
  if (!window_) finish_report();
}

LossValue TrainingExecutor::loss(const LossSpec& spec, const Tensor& target, bool with_gradient) {
  if (graph_.parallel_loss) return parallel_loss(spec, target, with_gradient);
  Schedule& s = *schedule_;
  loss_seeds_ = {spec.input};
  const int slot = s.home_slot[spec.input];
  TANDEM_ASSERT(slot >= 0, "the loss's input is not produced");
  const int device = s.slot_keys[slot].second;
  const std::string context = "the loss (" + spec.op + ")";
  loss_value_ = LossValue{};
  loss_device_ = -1;
  {  // on an error, every buffer of the step goes back to its pool
    ReleaseOnError release(*this);
    Tensor on_device_target = device == 0 ? target : copy_between(target, 0, device, context);
    Tensor grad;
    if (with_gradient) {
      TANDEM_ASSERT(requires_grad_[spec.input], "the loss's input has no gradient");
      grads_[slot] = allocate_on(device, shapes_[spec.input], DType::float32, context);
      grad = grads_[slot];
    }
    // the host reads loss_value_ once the lane has run it: now, or at the pipelined step's end
    TraceLabel label(context);
    PlanDevice& dev = *s.devices[device];
    dev.backend->loss(*dev.compute, spec, values_[slot], on_device_target, grad, &loss_value_);
    synchronize_unless_pipelined();
  }
  // In a pipelined step the lane may still be writing the value: the step reads it
  // (last_loss()) once it has waited for the lanes.
  if (window_) {
    loss_device_ = device;
    return LossValue{};
  }
  finish_report();
  return loss_value_;
}

DeviceEvent TrainingExecutor::loss_written() {
  return loss_device_ < 0 ? DeviceEvent() : schedule_->devices[loss_device_]->compute->record();
}

LossValue TrainingExecutor::parallel_loss(const LossSpec& spec, const Tensor& target, bool with_gradient) {
  Schedule& s = *schedule_;
  const ParallelLoss& parallel = *graph_.parallel_loss;
  const size_t n = parallel.parts.size();
  std::vector<LossValue> values(n);
  std::vector<int> slots(n), devices(n);
  loss_device_ = -1;  // the host waits for every replica's below
  loss_seeds_.clear();
  {  // on an error, every buffer of the step goes back to its pool
    ReleaseOnError release(*this);
    for (size_t k = 0; k < n; ++k) {
      const ParallelLoss::Part& part = parallel.parts[k];
      slots[k] = s.home_slot[part.value];
      TANDEM_ASSERT(slots[k] >= 0, "a replica's share of the loss's input is not produced");
      devices[k] = s.slot_keys[slots[k]].second;
      PlanDevice& dev = *s.devices[devices[k]];
      const std::string context = "the parallel loss (" + spec.op + ") on " + dev.device.str();
      Tensor rows_k = parallel_loss_target(target, parallel, k);
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
  // Only scalars travelled: each replica's gradient was of its own mean, rescaled to the batch's.
  std::vector<float> scales;
  loss_value_ = combine_parallel_losses(values, spec.reduction == "mean", scales);
  if (with_gradient && spec.reduction == "mean")
    for (size_t k = 0; k < n; ++k) {
      TraceLabel label("the parallel loss's gradient rescaled to the batch's mean");
      PlanDevice& dev = *s.devices[devices[k]];
      dev.backend->scale(*dev.compute, grads_[slots[k]], scales[k]);
      after_submit();
    }
  if (!window_) finish_report();
  return loss_value_;
}

void TrainingExecutor::scale_loss_gradients(float factor) {
  Schedule& s = *schedule_;
  for (int value : loss_seeds_) {
    const int slot = s.home_slot[value];
    PlanDevice& dev = *s.devices[s.slot_keys[slot].second];
    TraceLabel label("the loss's gradient scaled (fp16 loss scaling)");
    dev.backend->scale(*dev.compute, grads_[slot], factor);
    after_submit();
  }
}

void TrainingExecutor::seed_gradient(int value, const Tensor& grad) {
  const int slot = schedule_->home_slot[value];
  TANDEM_ASSERT(slot >= 0 && requires_grad_[value], "tensor '" + graph_.values[value].name + "' has no gradient");
  const int device = schedule_->slot_keys[slot].second;
  if (device == 0) {
    grads_[slot] = Tensor::empty(shapes_[value], DType::float32);
    std::memcpy(grads_[slot].raw_data(), grad.raw_data(), grads_[slot].nbytes());
  } else {
    grads_[slot] = copy_between(grad, 0, device, "the gradient of '" + graph_.values[value].name + "'");
  }
}

void TrainingExecutor::begin_report() { start_device_reports(schedule_->devices); }

void TrainingExecutor::finish_report() { report_ = device_reports(schedule_->devices); }

std::vector<DeviceReport> TrainingExecutor::counted_by_host() const {
  std::vector<DeviceReport> out;
  for (const auto& d : schedule_->devices) {
    DeviceReport& r = out.emplace_back();
    r.device = d->device;
    r.bytes_in = d->counted_here.bytes_in;
    r.bytes_out = d->counted_here.bytes_out;
    r.copies_in = d->counted_here.copies_in;
    r.copies_out = d->counted_here.copies_out;
  }
  return out;
}

void TrainingExecutor::wait_for_lanes() { synchronize_devices(schedule_->devices); }

void TrainingExecutor::synchronize_unless_pipelined() {
  if (!window_) synchronize_devices(schedule_->devices);
}

void TrainingExecutor::add_to_window(PipelineWindow& window) const {
  for (size_t d = 0; d < schedule_->devices.size(); ++d) {
    const PlanDevice& dev = *schedule_->devices[d];
    window.add(dev.device, dev.backend->allocator().current_bytes(), budget_[d]);
  }
}

}  // namespace tandem
