#include "runtime/node_kernels.h"

#include "backends/cpu/cpu_kernels.h"

namespace tandem {

std::vector<Shape> concrete_shapes(const Graph& graph, const Bindings& bindings) {
  std::vector<Shape> shapes;
  for (const Value& v : graph.values) {
    Shape shape;
    for (const Dim& d : v.type.shape) {
      auto size = d.evaluate(bindings);
      if (!size) throw UserError("tensor '" + v.name + "' has size " + d.str() + ", but not all of its symbols have values");
      if (*size < 0) throw UserError("tensor '" + v.name + "' would have a negative size " + d.str() + " = " + std::to_string(*size));
      shape.push_back(*size);
    }
    shape_numel(shape);
    shapes.push_back(std::move(shape));
  }
  return shapes;
}

std::unique_ptr<Kernel> make_cpu_kernel(CpuContext& cpu, const Graph& graph, const Node& node,
                                        const std::vector<Shape>& shapes, const std::vector<Tensor>& params) {
  CpuKernelFactory factory = find_cpu_kernel(node.op);
  if (!factory) throw UserError("layer '" + node.path + "': the cpu backend cannot run op '" + node.op + "'");
  KernelSpec spec;
  spec.op = node.op;
  spec.attrs = &node.attrs;
  for (int v : node.inputs) spec.inputs.push_back({shapes[v], graph.values[v].type.dtype});
  for (const Tensor& p : params) spec.params.push_back({p.shape(), p.dtype()});
  spec.outputs.push_back({shapes[node.output], graph.values[node.output].type.dtype});
  try {
    return factory(cpu, spec);
  } catch (const UserError& e) {
    throw UserError("layer '" + node.path + "' (" + node.op + "): " + e.what());
  }
}

std::string layer_in_messages(const Node& node) { return "layer '" + node.path + "' (" + node.op + ")"; }

Tensor allocate_for_layer(const Node& node, const Shape& shape, DType dtype, const char* what) {
  try {
    return Tensor::empty(shape, dtype);
  } catch (const OutOfMemory& e) {
    throw e.in(layer_in_messages(node) + " " + what + " " + shape_str(shape));
  } catch (const UserError& e) {  // larger than a tensor may be
    throw UserError(layer_in_messages(node) + " " + what + ": " + e.what());
  }
}

void forward_naming_layer(Kernel& kernel, const KernelArgs& args, const std::string& layer) {
  try {
    kernel.forward(args);
  } catch (const OutOfMemory& e) {
    throw e.in(layer);
  } catch (const UserError& e) {
    throw UserError(layer + ": " + e.what());
  }
}

void backward_naming_layer(Kernel& kernel, const BackwardArgs& args, const std::string& layer) {
  try {
    kernel.backward(args);
  } catch (const OutOfMemory& e) {
    throw e.in(layer + " backward");
  } catch (const UserError& e) {
    throw UserError(layer + " backward: " + e.what());
  }
}

}  // namespace tandem
