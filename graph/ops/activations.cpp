// Elementwise activations: relu, gelu, tanh, sigmoid; the output has the input's type.
#include "graph/ops/op_schemas.h"

namespace tandem {
namespace {

TensorType same_float_type(const std::vector<TensorType>& in, const Attributes&) {
  require_dtype(in[0], DType::float32, "the input");
  return in[0];
}

OpSchema unary(std::string name, std::string summary, std::vector<AttrSpec> attrs = {}) {
  OpSchema s;
  s.name = std::move(name);
  s.summary = std::move(summary);
  s.attrs = std::move(attrs);
  s.infer = same_float_type;
  return s;
}

}  // namespace

std::vector<OpSchema> activation_schemas() {
  return {
      unary("relu", "max(x, 0) (torch.nn.ReLU)", {{"inplace", AttrType::boolean, false}}),
      unary("gelu", "Gaussian error linear unit (torch.nn.GELU)",
            {{"approximate", AttrType::string, std::string("none"), false, false, {"none", "tanh"}}}),
      unary("tanh", "hyperbolic tangent (torch.nn.Tanh)"),
      unary("sigmoid", "logistic sigmoid (torch.nn.Sigmoid)"),
  };
}

}  // namespace tandem
