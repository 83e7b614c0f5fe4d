// What the forward and training executors both need to compile a plan: every tensor's
// concrete shape for one set of symbol values, and each layer's kernel at those shapes.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "backends/compute_ops.h"
#include "backends/kernel.h"
#include "graph/graph.h"
#include "graph/symbolic.h"

namespace tandem {

/// Every value's shape under `bindings`. UserError when a size has a symbol without a
/// value, is negative, or is too large, or when a layer cannot take the shapes these
/// values give (OpSchema::check_bound).
std::vector<Shape> concrete_shapes(const Graph& graph, const Bindings& bindings);

/// What a backend is asked to make for `node`: its op, attributes and concrete shapes.
KernelSpec node_kernel_spec(const Graph& graph, const Node& node, const std::vector<Shape>& shapes,
                            const std::vector<Tensor>& params);

/// The kernel of `node` on `device` for these shapes and parameters, from `make` (a
/// Backend's or ComputeOps' make_kernel). UserError naming the layer and the device when
/// there is none, or the shapes are refused.
std::unique_ptr<Kernel> make_node_kernel(const std::function<KernelChoice(const KernelSpec&)>& make, Device device,
                                         const Graph& graph, const Node& node, const std::vector<Shape>& shapes,
                                         const std::vector<Tensor>& params);

/// kernel.forward(args), its errors named after `layer` ("layer 'fc' (linear)"): a
/// UserError's message and an OutOfMemory's context say which layer failed.
void forward_naming_layer(Kernel& kernel, const KernelArgs& args, const std::string& layer);
/// kernel.backward(args), the same, as "layer 'fc' (linear) backward".
void backward_naming_layer(Kernel& kernel, const BackwardArgs& args, const std::string& layer);

}  // namespace tandem
