// What a traced task worked on (backends/trace.h): the arguments of a layer's kernel or a
// copy as the JSON object a trace slice carries, so that a slow slice says which layer, on
// which shapes, and how many bytes moved. Build them only under a trace (Trace::active()):
// they cost a few allocations each.
#pragma once

#include <span>
#include <string>

#include "core/device.h"
#include "core/tensor.h"
#include "graph/graph.h"

namespace tandem {

/// {"layer": "enc.fc1", "op": "linear", "device": "cuda:0", "inputs": [[32, 64]], "output": [32, 16],
///  "bytes": what the inputs and output take}
std::string layer_trace_args(const Node& node, Device device, std::span<const Tensor> inputs, const Shape& output,
                             DType output_dtype);
/// {"from": "cpu", "to": "cuda:0", "shape": [32, 64], "bytes": 8192}
std::string copy_trace_args(Device from, Device to, const Tensor& tensor);

}  // namespace tandem
