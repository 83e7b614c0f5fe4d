#include "runtime/exec/trace_args.h"

#include <nlohmann/json.hpp>

namespace tandem {

std::string layer_trace_args(const Node& node, Device device, std::span<const Tensor> inputs, const Shape& output,
                             DType output_dtype) {
  nlohmann::json shapes = nlohmann::json::array();
  size_t bytes = static_cast<size_t>(shape_numel(output)) * dtype_size(output_dtype);
  for (const Tensor& t : inputs) {
    shapes.push_back(t.shape());
    bytes += t.nbytes();
  }
  return nlohmann::json{{"layer", node.path}, {"op", node.op},      {"device", device.str()},
                        {"inputs", shapes},   {"output", output},   {"bytes", bytes}}
      .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string copy_trace_args(Device from, Device to, const Tensor& tensor) {
  return nlohmann::json{{"from", from.str()}, {"to", to.str()}, {"shape", tensor.shape()}, {"bytes", tensor.nbytes()}}
      .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace tandem
