// TrainingExecutor's backward pass (training_executor.h): the steps in reverse, each
// layer's backward on its device's lane, the gradients of forward copies sent back, and
// each parameter's gradient handed on as it completes (gradient_return.h).
#include <algorithm>
#include <cmath>
#include <optional>

#include "backends/trace.h"
#include "core/error.h"
#include "runtime/exec/gradient_return.h"
#include "runtime/exec/layer_seed.h"
#include "runtime/exec/node_kernels.h"
#include "runtime/exec/schedule.h"
#include "runtime/exec/trace_args.h"
#include "runtime/exec/training_executor.h"

namespace tandem {

void TrainingExecutor::assign_or_add(int slot, int device, Tensor from) {
  if (!grad_ready_[slot]) {
    grads_[slot] = std::move(from);
  } else {
    TraceLabel label("gradient accumulated");
    PlanDevice& dev = *schedule_->devices[device];
    dev.backend->accumulate(*dev.compute, grads_[slot], from);
    after_submit();
  }
  grad_ready_[slot] = true;
}

void TrainingExecutor::backward_step(int step, const TableUpdates* tables) {
  Schedule& s = *schedule_;
  const int index = s.step_action[step];
  const ScheduleAction& a = s.actions[index];
  GradientTargets& targets = targets_[index];
  PlanDevice& dev = *s.devices[a.device];
  const Node& node = *a.node;
  const int out = a.out_slot;
  if (!requires_grad_[node.output] || !grad_ready_[out]) {
    values_[out] = Tensor();
    return;
  }
  if (!a.kernel) {  // a view: the gradient is the output's, reshaped (the same storage)
    const int in = a.in_slots[0];
    if (requires_grad_[s.slot_keys[in].first]) assign_or_add(in, a.device, grads_[out].view(shapes_[s.slot_keys[in].first]));
    grads_[out] = Tensor();
    values_[out] = Tensor();
    return;
  }
  // An input's gradient is assigned by its first contribution; a later one (a tensor with
  // several readers) is computed aside and added.
  std::vector<Tensor> in_values, grad_inputs(a.in_slots.size()), accumulate_into(a.in_slots.size());
  std::vector<bool> written_now(a.in_slots.size(), false);
  for (size_t k = 0; k < a.in_slots.size(); ++k) {
    const int slot = a.in_slots[k];
    const int v = s.slot_keys[slot].first;
    in_values.push_back(values_[slot]);
    if (!requires_grad_[v]) continue;
    bool taken = grad_ready_[slot];
    for (size_t j = 0; j < k; ++j) taken = taken || (written_now[j] && a.in_slots[j] == slot);
    if (taken) {
      grad_inputs[k] = allocate_on(a.device, shapes_[v], DType::float32, a.context, nullptr, "backward");
      accumulate_into[k] = grads_[slot];
    } else {
      // in host memory a GPU copies fastest when it goes up to one (the reverse of the
      // forward copy that brought the value down)
      grads_[slot] = allocate_on(a.device, shapes_[v], DType::float32, a.context, &s.allocator_for(slot, a.device),
                                 "backward");
      grad_inputs[k] = grads_[slot];
      written_now[k] = true;
    }
  }
  // the tables whose gradient this backward completes, updated in the same task
  std::vector<std::string> update_now;
  if (tables)
    for (const std::string& p : targets.completed_on_cpu)
      if (tables->params.count(p)) update_now.push_back(p);
  std::function<void(const std::string&)> update_table, table_stepped;
  std::optional<float> table_step;  // Note [a table stepped in its backward] (table_updates.h)
  std::vector<const LossValue*> losses;
  if (!update_now.empty()) {
    update_table = tables->update;
    if (const auto it = tables->steps.find(targets.steppable_table); it != tables->steps.end()) {
      table_step = it->second;
      table_stepped = tables->stepped;
    }
    losses = tables->losses;
    // the losses are read on this lane: after the work that writes them
    for (const DeviceEvent& written : tables->loss_written) dev.compute->wait(written);
  }
  {
    TraceLabel label(a.context, update_now.empty() ? "backward" : "backward and table update");
    TraceArgs args(Trace::active() ? layer_trace_args(node, dev.device, in_values, shapes_[node.output], DType::float32)
                                   : std::string());
    dev.compute->submit(
        [&a, &targets, in_values = std::move(in_values), out_value = values_[out], out_grad = grads_[out], grad_inputs,
         training = training_, step_seed = layer_seed(seed_, a.step), version = params_version_,
         update_now = std::move(update_now), update_table = std::move(update_table), table_step,
         table_stepped = std::move(table_stepped), losses = std::move(losses)]() mutable {
          // a loss that is not finite stops the run before the update: nothing moves
          const bool finite = std::all_of(losses.begin(), losses.end(),
                                          [](const LossValue* loss) { return std::isfinite(loss->loss); });
          BackwardArgs args{in_values,           a.params, {&out_value, 1}, {&out_grad, 1},     grad_inputs,
                            targets.param_grads, training, step_seed,       version, targets.recorded_rows};
          if (finite) args.table_step = table_step;
          // first: a backward may throw. Only cpu layers have touched rows, and the cpu's
          // lane runs on the host.
          for (TouchedRows* rows : targets.unrecorded_rows) rows->mark_all();
          backward_naming_layer(*a.kernel, args, a.context);
          if (finite)
            for (const std::string& table : update_now) {
              if (args.table_step && table == targets.steppable_table) table_stepped(table);
              else update_table(table);
            }
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
  grads_[out] = Tensor();  // this was the last step to read the output and its gradient
  values_[out] = Tensor();
}

void TrainingExecutor::return_copy_gradients(int step) {
  Schedule& s = *schedule_;
  // every reader of these copies has run its backward: their gradients go back
  for (int c : copies_after_backward_[step]) {
    const ScheduleAction& copy = s.actions[c];
    const int dst = copy.dst_slot, src = copy.src_slot;
    const int value = s.slot_keys[dst].first;
    if (requires_grad_[value] && grad_ready_[dst])
      assign_or_add(src, copy.from_device,
                    copy_between(grads_[dst], copy.device, copy.from_device,
                                 "the gradient of '" + graph_.values[value].name + "'"));
    grads_[dst] = Tensor();
    values_[dst] = Tensor();
  }
}

void TrainingExecutor::backward(const std::vector<int>& seeded, const GradientReady* ready,
                                const TableUpdates* tables) {
  Schedule& s = *schedule_;
  std::fill(grad_ready_.begin(), grad_ready_.end(), false);
  for (int v : seeded) grad_ready_[s.home_slot[v]] = true;
  for (size_t slot = 0; slot < grads_.size(); ++slot)
    if (!grad_ready_[slot]) grads_[slot] = Tensor();
  {  // on an error, every buffer of the step goes back to its pool
    ReleaseOnError release(*this);
    gradient_return_->begin(ready);
    s.replica_groups.start_pass();
    for (size_t i = plan_.steps.size(); i-- > 0;) {
      backward_step(static_cast<int>(i), tables);
      gradient_return_->step_done(static_cast<int>(i));  // overlapped with the rest of backward
      return_copy_gradients(static_cast<int>(i));
    }
    DeviceParameterCache::Traffic downloaded = gradient_return_->finish();
    s.devices[0]->counted_here.bytes_in += downloaded.bytes;  // the cpu's side of the GPUs' copies
    s.devices[0]->counted_here.copies_in += downloaded.copies;
    // the optimizer reads the gradients on the host; in a pipelined step, once the step's
    // last micro-batch is through (the first step, in lockstep, measures before it goes on)
    if (lockstep_) synchronize_devices(s.devices);
    else synchronize_unless_pipelined();
    if (lockstep_) {  // the first step, run in lockstep, sets how far later ones may run ahead
      for (size_t d = 0; d < s.devices.size(); ++d) {  // the step's growth: what it held at once above its start
        const size_t peak = s.devices[d]->backend->allocator().peak_bytes();
        budget_[d] = std::max(budget_[d], peak > step_start_[d] ? peak - step_start_[d] : 0);
      }
      lockstep_ = false;
    }
  }
  for (Tensor& t : values_) t = Tensor();
  for (size_t slot = 0; slot < grads_.size(); ++slot)  // keep the graph inputs' gradients only
    if (s.slot_keys[slot].second != 0 || graph_.values[s.slot_keys[slot].first].producer >= 0) grads_[slot] = Tensor();
  if (!window_) finish_report();
}

Tensor TrainingExecutor::input_gradient(size_t index) const {
  const int v = graph_.inputs.at(index).value;
  if (!requires_grad_[v]) return Tensor();
  const int slot = schedule_->home_slot[v];
  if (!grad_ready_[slot]) return Tensor::zeros(shapes_[v], DType::float32);  // the outputs do not depend on it
  return grads_[slot];
}

}  // namespace tandem
