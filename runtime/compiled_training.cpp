#include "runtime/compiled_training.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <set>

#include "backends/trace.h"
#include "runtime/node_kernels.h"
#include "runtime/trace_args.h"

namespace tandem {

CompiledTraining::CompiledTraining(const Graph& graph, const Plan& plan, const Bindings& bindings, ComputeOps& ops,
                                   const TensorMap& params, const TensorMap& param_grads,
                                   TouchedRowsMap& param_rows, bool input_grads, const std::vector<int>& kept)
    : graph_(graph), ops_(ops), shapes_(concrete_shapes(graph, bindings)) {
  const size_t n_values = graph.values.size();
  requires_grad_.assign(n_values, false);
  if (input_grads)
    for (const GraphInput& in : graph.inputs) requires_grad_[in.value] = graph.values[in.value].type.dtype == DType::float32;
  values_.resize(n_values);
  for (const OpStep& op_step : plan.steps) {
    const Node& node = graph.nodes[op_step.node];
    Step step;
    step.node = &node;
    bool needs = any_trainable(node.params);
    for (int v : node.inputs) needs = needs || requires_grad_[v];
    requires_grad_[node.output] = needs && graph.values[node.output].type.dtype == DType::float32;
    for (const ParamSpec& p : node.params) {
      step.params.push_back(params.at(p.name));
      // a buffer has none; a row gradient (sparse: true) has no dense one: its rows below
      auto grad = p.trainable ? param_grads.find(p.name) : param_grads.end();
      step.param_grads.push_back(grad == param_grads.end() ? Tensor() : grad->second);
    }
    if (!node.schema->is_view) {
      step.kernel = make_node_kernel([&](const KernelSpec& spec) { return ops.make_kernel(spec); }, Device::cpu(), graph,
                                     node, shapes_, step.params);
      for (size_t k = 0; k < node.params.size(); ++k) {
        auto it = node.params[k].trainable ? param_rows.find(node.params[k].name) : param_rows.end();
        TouchedRows* rows = it == param_rows.end() ? nullptr : &it->second;
        const bool recorded = rows && step.kernel->records_touched_rows(k);
        step.recorded_rows.push_back(recorded ? rows : nullptr);
        if (rows && !recorded) step.unrecorded_rows.push_back(rows);
      }
    }
    steps_.push_back(std::move(step));
  }
  grads_.resize(n_values);
  grad_ready_.assign(n_values, false);

  // A tensor that no backward reads can go once its last forward reader has run.
  std::vector<bool> read_in_backward(n_values, false);
  for (int v : kept) read_in_backward[v] = true;
  for (const GraphOutput& out : graph.outputs) read_in_backward[out.value] = true;
  std::vector<int> last_forward_reader(n_values, -1);
  for (size_t i = 0; i < steps_.size(); ++i) {
    const Step& step = steps_[i];
    const Node& node = *step.node;
    last_forward_reader[node.output] = static_cast<int>(i);
    for (size_t k = 0; k < node.inputs.size(); ++k) {
      last_forward_reader[node.inputs[k]] = static_cast<int>(i);
      if (step.kernel && step.kernel->backward_reads_input(k)) read_in_backward[node.inputs[k]] = true;
    }
    if (step.kernel && step.kernel->backward_reads_output()) read_in_backward[node.output] = true;
  }
  complete_after_.resize(steps_.size());
  std::set<std::string> seen;
  for (size_t i = 0; i < steps_.size(); ++i)
    for (const ParamSpec& p : steps_[i].node->params)
      if (p.trainable && seen.insert(p.name).second) complete_after_[i].push_back(p.name);
  release_after_forward_.resize(steps_.size());
  for (size_t v = 0; v < n_values; ++v)
    if (!read_in_backward[v] && last_forward_reader[v] >= 0) release_after_forward_[last_forward_reader[v]].push_back(v);
}

void CompiledTraining::forward(const std::vector<Tensor>& inputs, uint64_t seed, uint64_t params_version,
                               bool training) {
  seed_ = seed;
  training_ = training;
  params_version_ = params_version;
  for (size_t i = 0; i < graph_.inputs.size(); ++i) values_[graph_.inputs[i].value] = inputs[i];
  std::vector<Tensor> args_in;
  Trace* const trace = Trace::active();
  for (size_t i = 0; i < steps_.size(); ++i) {
    Step& step = steps_[i];
    const Node& node = *step.node;
    if (!step.kernel) {
      values_[node.output] = values_[node.inputs[0]].view(shapes_[node.output]);
      continue;
    }
    args_in.clear();
    for (int v : node.inputs) args_in.push_back(values_[v]);
    values_[node.output] = allocate_for_layer(node, shapes_[node.output], graph_.values[node.output].type.dtype, "output");
    KernelArgs args{args_in, step.params, {&values_[node.output], 1}, training, seed * 0x9e3779b97f4a7c15ULL + i,
                    params_version};
    std::optional<HostSpan> traced;  // the cpu's layers on a track of their own
    if (trace)
      traced.emplace(layer_in_messages(node) + " forward", "cpu",
                     layer_trace_args(node, Device::cpu(), args_in, shapes_[node.output],
                                      graph_.values[node.output].type.dtype));
    try {
      step.kernel->forward(args);
    } catch (const OutOfMemory& e) {  // a kernel's workspace
      throw e.in(layer_in_messages(node));
    } catch (const UserError& e) {
      throw UserError(layer_in_messages(node) + ": " + e.what());
    }
    for (int v : release_after_forward_[i]) values_[v] = Tensor();
  }
}

Tensor& CompiledTraining::gradient_buffer(int value_id) {
  TANDEM_ASSERT(requires_grad_[value_id], "tensor '" + graph_.values[value_id].name + "' has no gradient");
  if (!grads_[value_id].defined()) {
    try {
      grads_[value_id] = Tensor::empty(shapes_[value_id], DType::float32);
    } catch (const OutOfMemory& e) {
      throw e.in("the gradient of '" + graph_.values[value_id].name + "' " + shape_str(shapes_[value_id]));
    }
  }
  return grads_[value_id];
}

void CompiledTraining::backward(const std::vector<int>& seeded, const GradientReady* ready) {
  std::fill(grad_ready_.begin(), grad_ready_.end(), false);
  for (int v : seeded) grad_ready_[v] = true;
  for (size_t v = 0; v < grads_.size(); ++v)  // what an earlier backward left (graph inputs' gradients)
    if (!grad_ready_[v]) grads_[v] = Tensor();
  std::vector<Tensor> in_values, grad_inputs;
  Trace* const trace = Trace::active();
  auto backward_step = [&](size_t i) {
    Step& step = steps_[i];
    const Node& node = *step.node;
    const int out = node.output;
    if (!requires_grad_[out] || !grad_ready_[out]) {
      values_[out] = Tensor();
      return;
    }
    if (!step.kernel) {  // a view: the gradient is the output's, reshaped
      int in = node.inputs[0];
      if (requires_grad_[in]) {
        Tensor g = grads_[out].view(shapes_[in]);
        if (grad_ready_[in]) ops_.accumulate(grads_[in], g);
        else grads_[in] = g;  // the same storage: nothing to copy
        grad_ready_[in] = true;
      }
      grads_[out] = Tensor();
      values_[out] = Tensor();
      return;
    }
    in_values.clear();
    grad_inputs.assign(node.inputs.size(), Tensor());
    std::vector<bool> written_now(node.inputs.size(), false);
    for (size_t k = 0; k < node.inputs.size(); ++k) {
      int v = node.inputs[k];
      in_values.push_back(values_[v]);
      if (!requires_grad_[v]) continue;
      bool taken = grad_ready_[v];
      for (size_t j = 0; j < k; ++j) taken = taken || (written_now[j] && node.inputs[j] == v);
      if (taken) {  // a second contribution: write aside, sum after
        grad_inputs[k] = allocate_for_layer(node, shapes_[v], DType::float32, "backward: an input's gradient");
      } else {
        grads_[v] = allocate_for_layer(node, shapes_[v], DType::float32, "backward: an input's gradient");
        grad_inputs[k] = grads_[v];
        written_now[k] = true;
      }
    }
    BackwardArgs args{in_values, step.params, {&values_[out], 1}, {&grads_[out], 1}, grad_inputs, step.param_grads,
                      training_, seed_ * 0x9e3779b97f4a7c15ULL + i, params_version_, step.recorded_rows};
    std::optional<HostSpan> traced;
    if (trace)
      traced.emplace(layer_in_messages(node) + " backward", "cpu",
                     layer_trace_args(node, Device::cpu(), in_values, shapes_[out], DType::float32));
    // before the call: a gradient half written by a backward that throws is still marked
    for (TouchedRows* rows : step.unrecorded_rows) rows->mark_all();
    try {
      step.kernel->backward(args);
    } catch (const OutOfMemory& e) {  // a kernel's workspace
      throw e.in(layer_in_messages(node) + " backward");
    } catch (const UserError& e) {
      throw UserError(layer_in_messages(node) + " backward: " + e.what());
    }
    for (size_t k = 0; k < node.inputs.size(); ++k) {
      int v = node.inputs[k];
      if (!grad_inputs[k].defined()) continue;
      if (!written_now[k]) ops_.accumulate(grads_[v], grad_inputs[k]);
      grad_ready_[v] = true;
    }
    // this was the last step to read the output and its gradient
    grads_[out] = Tensor();
    values_[out] = Tensor();
  };
  for (size_t i = steps_.size(); i-- > 0;) {
    backward_step(i);
    if (ready)
      for (const std::string& name : complete_after_[i]) (*ready)(name);
  }
}

Tensor CompiledTraining::input_gradient(size_t index) const {
  int v = graph_.inputs.at(index).value;
  if (!requires_grad_[v]) return Tensor();
  if (!grad_ready_[v]) return Tensor::zeros(shapes_[v], DType::float32);  // the outputs do not depend on it
  return grads_[v];
}

}  // namespace tandem
