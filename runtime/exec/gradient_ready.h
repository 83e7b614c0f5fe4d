// Told by a backward, as soon as it is complete, of each trainable parameter whose
// gradient this backward will not add to any more: data parallelism over processes
// starts reducing that gradient while the rest of backward runs (runtime/distributed/).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "graph/graph.h"

namespace tandem {

using GradientReady = std::function<void(const std::string& parameter)>;

/// The order in which a backward completes the trainable parameters' gradients: a
/// parameter is complete after the backward of the first layer that uses it, and backward
/// runs the layers in reverse, so the last layers' parameters come first.
std::vector<std::string> gradient_completion_order(const Graph& graph);

}  // namespace tandem
