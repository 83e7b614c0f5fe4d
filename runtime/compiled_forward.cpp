#include "runtime/compiled_forward.h"

#include <algorithm>
#include <optional>

#include "backends/trace.h"
#include "runtime/node_kernels.h"
#include "runtime/trace_args.h"

namespace tandem {

CompiledForward::CompiledForward(const Graph& graph, const Plan& plan, const Bindings& bindings, ComputeOps& ops,
                                 const TensorMap& params)
    : graph_(graph), value_shapes_(concrete_shapes(graph, bindings)) {
  for (const OpStep& op_step : plan.steps) {
    const Node& node = graph.nodes[op_step.node];
    Step step;
    step.node = &node;
    for (const ParamSpec& p : node.params) step.params.push_back(params.at(p.name));
    if (!node.schema->is_view)
      step.kernel = make_node_kernel([&](const KernelSpec& spec) { return ops.make_kernel(spec); }, Device::cpu(), graph,
                                     node, value_shapes_, step.params);
    steps_.push_back(std::move(step));
  }
  plan_buffers(graph);
  values_.resize(graph.values.size());
}

void CompiledForward::plan_buffers(const Graph& graph) {
  const size_t n_values = graph.values.size();
  // A view's storage is its input's: follow views back to the value that owns storage.
  std::vector<int> root(n_values);
  for (size_t v = 0; v < n_values; ++v) root[v] = static_cast<int>(v);
  for (const Step& s : steps_)
    if (s.node->schema->is_view) root[s.node->output] = root[s.node->inputs[0]];
  std::vector<bool> escapes(n_values, false);
  for (const GraphOutput& out : graph.outputs) escapes[root[out.value]] = true;
  std::vector<int> last_use(n_values, -1);
  for (size_t i = 0; i < steps_.size(); ++i) {
    for (int v : steps_[i].node->inputs) last_use[root[v]] = std::max(last_use[root[v]], static_cast<int>(i));
    last_use[root[steps_[i].node->output]] = std::max(last_use[root[steps_[i].node->output]], static_cast<int>(i));
  }
  std::vector<size_t> buffer_bytes;
  std::vector<size_t> sized_by;  // the step whose output set each buffer's size, for messages
  std::vector<int> free_buffers;
  std::vector<int> buffer_of(n_values, -1);
  for (size_t i = 0; i < steps_.size(); ++i) {
    Step& step = steps_[i];
    int out = step.node->output;
    if (!step.node->schema->is_view && !escapes[out]) {
      size_t need = static_cast<size_t>(shape_numel(value_shapes_[out])) * dtype_size(graph.values[out].type.dtype);
      // best fit among free buffers, else the largest free one grown, else a new one
      int best = -1;
      for (int b : free_buffers)
        if (buffer_bytes[b] >= need && (best < 0 || buffer_bytes[b] < buffer_bytes[best])) best = b;
      if (best < 0 && !free_buffers.empty()) {
        best = *std::max_element(free_buffers.begin(), free_buffers.end(),
                                 [&](int a, int b) { return buffer_bytes[a] < buffer_bytes[b]; });
        buffer_bytes[best] = need;
        sized_by[best] = i;
      }
      if (best < 0) {
        buffer_bytes.push_back(need);
        sized_by.push_back(i);
        best = static_cast<int>(buffer_bytes.size()) - 1;
      } else {
        free_buffers.erase(std::find(free_buffers.begin(), free_buffers.end(), best));
      }
      step.buffer = best;
      buffer_of[out] = best;
    }
    // release what this step read (or wrote, if nobody reads it) for the last time
    std::vector<int> touched = step.node->inputs;
    touched.push_back(out);
    for (int v : touched) {
      int r = root[v];
      if (last_use[r] == static_cast<int>(i) && buffer_of[r] >= 0) {
        free_buffers.push_back(buffer_of[r]);
        buffer_of[r] = -1;
      }
    }
  }
  for (size_t b = 0; b < buffer_bytes.size(); ++b) {
    try {
      arena_.push_back(Tensor::empty({static_cast<int64_t>((buffer_bytes[b] + 7) / 8)}, DType::int64));
    } catch (const UserError& e) {
      const Node& node = *steps_[sized_by[b]].node;
      const std::string what = layer_in_messages(node) + " output " + shape_str(value_shapes_[node.output]) +
                               " (in a buffer that layers after it reuse)";
      if (const auto* oom = dynamic_cast<const OutOfMemory*>(&e)) throw oom->in(what);
      throw UserError(what + ": " + e.what());
    }
    arena_bytes_ += arena_.back().nbytes();
  }
}

std::vector<Tensor> CompiledForward::run(const std::vector<Tensor>& inputs, uint64_t params_version, bool training,
                                         uint64_t seed, const ForwardHook* hook) {
  auto call_hook = [&](const Node& node) {
    if (!hook || !*hook) return;
    LayerCall call{&node, Device::cpu(), {}, value_shapes_[node.output]};
    for (int v : node.inputs) call.input_shapes.push_back(value_shapes_[v]);
    (*hook)(call);
  };
  for (size_t i = 0; i < graph_.inputs.size(); ++i) values_[graph_.inputs[i].value] = inputs[i];
  Trace* const trace = Trace::active();
  Tensor in_args[16];
  std::vector<Tensor> many_inputs;
  for (size_t i = 0; i < steps_.size(); ++i) {
    Step& step = steps_[i];
    const Node& node = *step.node;
    const Value& out_value = graph_.values[node.output];
    const Shape& out_shape = value_shapes_[node.output];
    if (!step.kernel) {  // a view
      values_[node.output] = values_[node.inputs[0]].view(out_shape);
      call_hook(node);
      continue;
    }
    Tensor& out = values_[node.output];
    if (step.buffer >= 0) out = Tensor::from_storage(arena_[step.buffer].storage(), out_shape, out_value.type.dtype);
    else out = allocate_for_layer(node, out_shape, out_value.type.dtype, "output");
    std::span<const Tensor> args_in;
    if (node.inputs.size() <= 16) {
      for (size_t k = 0; k < node.inputs.size(); ++k) in_args[k] = values_[node.inputs[k]];
      args_in = {in_args, node.inputs.size()};
    } else {
      many_inputs.clear();
      for (int v : node.inputs) many_inputs.push_back(values_[v]);
      args_in = many_inputs;
    }
    KernelArgs args{args_in, step.params, {&out, 1}, training, seed * 0x9e3779b97f4a7c15ULL + i, params_version};
    std::optional<HostSpan> traced;  // the cpu's layers on a track of their own
    if (trace)
      traced.emplace(layer_in_messages(node) + " forward", "cpu",
                     layer_trace_args(node, Device::cpu(), args_in, out_shape, out_value.type.dtype));
    try {
      step.kernel->forward(args);
    } catch (const OutOfMemory& e) {  // a kernel's workspace
      throw e.in(layer_in_messages(node));
    } catch (const UserError& e) {
      throw UserError(layer_in_messages(node) + ": " + e.what());
    }
    call_hook(node);
  }
  std::vector<Tensor> outputs;
  for (const GraphOutput& o : graph_.outputs) outputs.push_back(values_[o.value]);
  // drop references so that the caller's tensors are not kept alive by us
  for (Tensor& t : values_) t = Tensor();
  return outputs;
}

}  // namespace tandem
