// Forward hooks (after torch's register_forward_hook): a function called after each layer of
// an inference forward has run, with the layer as it ran, where, and its tensors. In a
// data_parallel block each replica is a layer of its own (node.replica says which), so a
// hook sees the chunks as a module replicated by nn.DataParallel sees them. The Python
// package's model.register_forward_hook is built on it (docs/python.md).
#pragma once

#include <functional>
#include <vector>

#include "core/device.h"
#include "core/tensor.h"
#include "graph/graph.h"

namespace tandem {

struct LayerCall {
  const Node* node = nullptr;
  Device device;
  std::vector<Shape> input_shapes;
  Shape output_shape;
  /// The layer's inputs and output in host memory: the cpu's own tensors for a layer on the
  /// cpu, copies of a device's (made only while a hook is set). Read them in the hook; keep
  /// a copy to use them later.
  std::vector<Tensor> inputs;
  Tensor output;
};

/// Called on the cpu's lane, after the layer ran (and its tensors reached the host): calls
/// for one forward come one at a time, in an order consistent with the dependencies.
using ForwardHook = std::function<void(const LayerCall&)>;

}  // namespace tandem
