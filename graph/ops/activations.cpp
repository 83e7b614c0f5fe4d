// Elementwise activations: relu, gelu, tanh, sigmoid, relu6, hardswish, hardsigmoid, silu,
// mish; the output has the input's type.
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
      unary("relu6", "min(max(x, 0), 6) (torch.nn.ReLU6)", {{"inplace", AttrType::boolean, false}}),
      unary("hardswish", "x relu6(x + 3) / 6 (torch.nn.Hardswish)", {{"inplace", AttrType::boolean, false}}),
      unary("hardsigmoid", "relu6(x + 3) / 6 (torch.nn.Hardsigmoid)", {{"inplace", AttrType::boolean, false}}),
      unary("silu", "x sigmoid(x), swish (torch.nn.SiLU)", {{"inplace", AttrType::boolean, false}}),
      unary("mish", "x tanh(softplus(x)) (torch.nn.Mish)", {{"inplace", AttrType::boolean, false}}),
  };
}

}  // namespace tandem
