// Elementwise activations: relu, gelu, tanh, sigmoid, relu6, hardswish, hardsigmoid, silu,
// mish, exp, and clamp between optional bounds; the output has the input's type.
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

/// clamp: min(max(x, min), max), each bound optional (null), as torch.clamp; swin v2's
/// clamp(logit_scale, max=log(100)).
OpSchema clamp() {
  OpSchema s = unary("clamp", "x bounded to [min, max], either optional (torch.clamp)",
                     {{"min", AttrType::number, {}, false, true}, {"max", AttrType::number, {}, false, true}});
  s.infer = [](const std::vector<TensorType>& in, const Attributes& a) {
    require_dtype(in[0], DType::float32, "the input");
    if (a.is_null("min") && a.is_null("max")) throw SchemaError("clamp needs min, max or both: both are null");
    return in[0];
  };
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
      unary("exp", "e^x (torch.exp)"),
      clamp(),
  };
}

}  // namespace tandem
