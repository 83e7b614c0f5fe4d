#include "runtime/exec/node_kernels.h"

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
  // what the schemas could not check while the sizes were symbols
  for (const Node& node : graph.nodes) {
    if (!node.schema || !node.schema->check_bound) continue;
    std::vector<Shape> inputs;
    for (int v : node.inputs) inputs.push_back(shapes[v]);
    try {
      node.schema->check_bound(inputs, node.attrs);
    } catch (const SchemaError& e) {
      std::string values;
      for (const auto& [symbol, value] : bindings) values += (values.empty() ? "" : ", ") + symbol + " = " + std::to_string(value);
      throw UserError(node.location.str() + ": layer '" + node.path + "': " + e.what() + " (with " + values +
                      "): give the symbols values it can take");
    }
  }
  return shapes;
}

KernelSpec node_kernel_spec(const Graph& graph, const Node& node, const std::vector<Shape>& shapes,
                            const std::vector<Tensor>& params) {
  KernelSpec spec;
  spec.op = node.op;
  spec.attrs = &node.attrs;
  spec.precision = layer_precision(graph, node);
  for (int v : node.inputs) spec.inputs.push_back({shapes[v], graph.values[v].type.dtype});
  for (const Tensor& p : params) spec.params.push_back({p.shape(), p.dtype()});
  spec.outputs.push_back({shapes[node.output], graph.values[node.output].type.dtype});
  return spec;
}

std::unique_ptr<Kernel> make_node_kernel(const std::function<KernelChoice(const KernelSpec&)>& make, Device device,
                                         const Graph& graph, const Node& node, const std::vector<Shape>& shapes,
                                         const std::vector<Tensor>& params) {
  KernelChoice choice;
  try {
    choice = make(node_kernel_spec(graph, node, shapes, params));
  } catch (const OutOfMemory& e) {
    throw e.in("layer '" + node.path + "' (" + node.op + ")");
  } catch (const UserError& e) {
    throw UserError("layer '" + node.path + "' (" + node.op + "): " + e.what());
  }
  if (!choice.kernel)
    throw UserError("layer '" + node.path + "' (" + node.op + ") cannot run on " + device.str() + ": " +
                    choice.unsupported + "; place it on another device (--place '" + node.path + "=cpu')");
  return std::move(choice.kernel);
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
