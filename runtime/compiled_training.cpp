#include "runtime/compiled_training.h"

#include <cstring>

#include "backends/cpu/cpu_kernels.h"

namespace tandem {
namespace {

void add_into(Tensor& into, const Tensor& from) {
  float* a = into.data<float>();
  const float* b = from.data<float>();
  const int64_t n = into.numel();
#pragma omp parallel for if (n > (1 << 16))
  for (int64_t i = 0; i < n; ++i) a[i] += b[i];
}

}  // namespace

CompiledTraining::CompiledTraining(const Graph& graph, const Plan& plan, const Bindings& bindings, CpuContext& cpu,
                                   const TensorMap& params, const TensorMap& param_grads, bool input_grads)
    : graph_(graph) {
  const size_t n_values = graph.values.size();
  for (const Value& v : graph.values) {
    Shape shape;
    for (const Dim& d : v.type.shape) {
      auto size = d.evaluate(bindings);
      if (!size) throw UserError("tensor '" + v.name + "' has size " + d.str() + ", but not all of its symbols have values");
      shape.push_back(*size);
    }
    shapes_.push_back(std::move(shape));
  }
  requires_grad_.assign(n_values, false);
  if (input_grads)
    for (const GraphInput& in : graph.inputs) requires_grad_[in.value] = graph.values[in.value].type.dtype == DType::float32;
  values_.resize(n_values);
  for (const OpStep& op_step : plan.steps) {
    const Node& node = graph.nodes[op_step.node];
    Step step;
    step.node = &node;
    bool needs = !node.params.empty();
    for (int v : node.inputs) needs = needs || requires_grad_[v];
    requires_grad_[node.output] = needs && graph.values[node.output].type.dtype == DType::float32;
    for (const ParamSpec& p : node.params) {
      step.params.push_back(params.at(p.name));
      step.param_grads.push_back(param_grads.at(p.name));
    }
    if (!node.schema->is_view) {
      CpuKernelFactory factory = find_cpu_kernel(node.op);
      if (!factory) throw UserError("layer '" + node.path + "': the cpu backend cannot run op '" + node.op + "'");
      KernelSpec spec;
      spec.op = node.op;
      spec.attrs = &node.attrs;
      for (int v : node.inputs) spec.inputs.push_back({shapes_[v], graph.values[v].type.dtype});
      for (const Tensor& p : step.params) spec.params.push_back({p.shape(), p.dtype()});
      spec.outputs.push_back({shapes_[node.output], graph.values[node.output].type.dtype});
      step.kernel = factory(cpu, spec);
      values_[node.output] = Tensor::empty(shapes_[node.output], graph.values[node.output].type.dtype);
    }
    step.scratch.resize(node.inputs.size());
    steps_.push_back(std::move(step));
  }
  grads_.resize(n_values);
  for (size_t v = 0; v < n_values; ++v)
    if (requires_grad_[v]) grads_[v] = Tensor::empty(shapes_[v], DType::float32);
  grad_ready_.assign(n_values, false);
}

void CompiledTraining::forward(const std::vector<Tensor>& inputs, uint64_t seed, uint64_t params_version,
                               bool training) {
  seed_ = seed;
  training_ = training;
  for (size_t i = 0; i < graph_.inputs.size(); ++i) values_[graph_.inputs[i].value] = inputs[i];
  std::vector<Tensor> args_in;
  for (size_t i = 0; i < steps_.size(); ++i) {
    Step& step = steps_[i];
    const Node& node = *step.node;
    if (!step.kernel) {
      values_[node.output] = values_[node.inputs[0]].view(shapes_[node.output]);
      continue;
    }
    args_in.clear();
    for (int v : node.inputs) args_in.push_back(values_[v]);
    KernelArgs args{args_in, step.params, {&values_[node.output], 1}, training, seed * 0x9e3779b97f4a7c15ULL + i,
                    params_version};
    try {
      step.kernel->forward(args);
    } catch (const UserError& e) {
      throw UserError("layer '" + node.path + "' (" + node.op + "): " + e.what());
    }
  }
}

Tensor& CompiledTraining::gradient_buffer(int value_id) {
  TANDEM_ASSERT(requires_grad_[value_id], "tensor '" + graph_.values[value_id].name + "' has no gradient");
  return grads_[value_id];
}

void CompiledTraining::backward(const std::vector<int>& seeded) {
  std::fill(grad_ready_.begin(), grad_ready_.end(), false);
  for (int v : seeded) grad_ready_[v] = true;
  std::vector<Tensor> in_values, grad_inputs;
  for (size_t i = steps_.size(); i-- > 0;) {
    Step& step = steps_[i];
    const Node& node = *step.node;
    const int out = node.output;
    if (!requires_grad_[out] || !grad_ready_[out]) continue;
    if (!step.kernel) {  // a view: the gradient is the output's, reshaped
      int in = node.inputs[0];
      if (!requires_grad_[in]) continue;
      Tensor g = grads_[out].view(shapes_[in]);
      if (grad_ready_[in]) add_into(grads_[in], g);
      else std::memcpy(grads_[in].raw_data(), g.raw_data(), g.nbytes());
      grad_ready_[in] = true;
      continue;
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
        if (!step.scratch[k].defined()) step.scratch[k] = Tensor::empty(shapes_[v], DType::float32);
        grad_inputs[k] = step.scratch[k];
      } else {
        grad_inputs[k] = grads_[v];
        written_now[k] = true;
      }
    }
    BackwardArgs args{in_values, step.params, {&values_[out], 1}, {&grads_[out], 1}, grad_inputs, step.param_grads,
                      training_, seed_ * 0x9e3779b97f4a7c15ULL + i};
    try {
      step.kernel->backward(args);
    } catch (const UserError& e) {
      throw UserError("layer '" + node.path + "' (" + node.op + ") backward: " + e.what());
    }
    for (size_t k = 0; k < node.inputs.size(); ++k) {
      int v = node.inputs[k];
      if (!grad_inputs[k].defined()) continue;
      if (!written_now[k]) add_into(grads_[v], grad_inputs[k]);
      grad_ready_[v] = true;
    }
  }
}

Tensor CompiledTraining::input_gradient(size_t index) const {
  int v = graph_.inputs.at(index).value;
  if (!requires_grad_[v]) return Tensor();
  if (!grad_ready_[v]) return Tensor::zeros(shapes_[v], DType::float32);  // the outputs do not depend on it
  return grads_[v].clone();
}

}  // namespace tandem
