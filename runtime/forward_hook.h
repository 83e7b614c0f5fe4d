// Forward hooks (after torch's register_forward_hook): a function called after each layer of
// an inference forward has run, with the layer as it ran, where, and its tensors' shapes.
// In a data_parallel block each replica is a layer of its own (node.replica says which), so
// a hook sees the chunks as a module replicated by nn.DataParallel sees them.
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
};

/// Called on the thread that ran the layer (a device's queue for placed runs: calls for one
/// forward come one at a time, in an order consistent with the dependencies).
using ForwardHook = std::function<void(const LayerCall&)>;

}  // namespace tandem
