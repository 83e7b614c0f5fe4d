#include "runtime/compiled_training.h"

#include <algorithm>
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
                                   const TensorMap& params, const TensorMap& param_grads, bool input_grads,
                                   const std::vector<int>& seedable)
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
  plan_gradients(seedable);
  grad_ready_.assign(n_values, false);
}

void CompiledTraining::plan_gradients(const std::vector<int>& seedable) {
  const size_t n_values = graph_.values.size();
  const int n_steps = static_cast<int>(steps_.size());
  std::vector<int> first_write(n_values, -1), producer_step(n_values, -1);
  for (int v : seedable)
    if (requires_grad_[v]) first_write[v] = n_steps;  // written before any backward step
  for (int i = 0; i < n_steps; ++i) {
    producer_step[steps_[i].node->output] = i;
    for (int v : steps_[i].node->inputs)
      if (requires_grad_[v]) first_write[v] = std::max(first_write[v], i);
  }
  std::vector<size_t> bytes;
  std::vector<int> free_list, buffer_of(n_values, -1);
  auto acquire = [&](size_t need) {
    int best = -1;
    for (int b : free_list)
      if (bytes[b] >= need && (best < 0 || bytes[b] < bytes[best])) best = b;
    if (best < 0 && !free_list.empty()) {
      best = *std::max_element(free_list.begin(), free_list.end(), [&](int a, int b) { return bytes[a] < bytes[b]; });
      bytes[best] = need;
    }
    if (best < 0) {
      bytes.push_back(need);
      return static_cast<int>(bytes.size()) - 1;
    }
    free_list.erase(std::find(free_list.begin(), free_list.end(), best));
    return best;
  };
  for (int t = n_steps; t >= 0; --t) {
    for (size_t v = 0; v < n_values; ++v)
      if (first_write[v] == t) buffer_of[v] = acquire(static_cast<size_t>(shape_numel(shapes_[v])) * 4);
    if (t == n_steps) continue;
    int out = steps_[t].node->output;  // its gradient is consumed by this step's backward
    if (buffer_of[out] >= 0 && producer_step[out] == t) free_list.push_back(buffer_of[out]);
  }
  for (size_t b : bytes) grad_buffers_.push_back(Tensor::empty({static_cast<int64_t>((b + 3) / 4)}, DType::float32));
  grads_.resize(n_values);
  for (size_t v = 0; v < n_values; ++v)
    if (buffer_of[v] >= 0) grads_[v] = Tensor::from_storage(grad_buffers_[buffer_of[v]].storage(), shapes_[v], DType::float32);
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
  TANDEM_ASSERT(grads_[value_id].defined(), "tensor '" + graph_.values[value_id].name + "' has no gradient buffer");
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
