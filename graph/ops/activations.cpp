// Elementwise activations, softmax/log_softmax and dropout: the output has the input's type.
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

OpSchema softmax_like(std::string name, std::string summary) {
  OpSchema s = unary(std::move(name), std::move(summary), {{"dim", AttrType::integer, {}, true}});
  s.infer = [](const std::vector<TensorType>& in, const Attributes& a) {
    require_dtype(in[0], DType::float32, "the input");
    normalize_dim(a.get_int("dim"), static_cast<int64_t>(in[0].shape.size()), "dim");
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
      softmax_like("softmax", "softmax along dim (torch.nn.Softmax)"),
      softmax_like("log_softmax", "log of softmax along dim (torch.nn.LogSoftmax)"),
      unary("dropout", "zeroes elements with probability p in training; identity in inference (torch.nn.Dropout)",
            {{"p", AttrType::number, 0.5, false, false, {}, 0.0, 1.0}, {"inplace", AttrType::boolean, false}}),
  };
}

}  // namespace tandem
