// dropout (torch.nn.Dropout): the output has the input's type.
#include "graph/ops/op_schemas.h"

namespace tandem {

std::vector<OpSchema> dropout_schemas() {
  OpSchema s;
  s.name = "dropout";
  s.summary = "zeroes elements with probability p in training; identity in inference (torch.nn.Dropout)";
  s.attrs = {{"p", AttrType::number, 0.5, false, false, {}, 0.0, 1.0}, {"inplace", AttrType::boolean, false}};
  s.infer = [](const std::vector<TensorType>& in, const Attributes&) {
    require_dtype(in[0], DType::float32, "the input");
    return in[0];
  };
  return {s};
}

}  // namespace tandem
