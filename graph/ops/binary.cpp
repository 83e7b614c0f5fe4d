// add (torch.add, with alpha) and mul (torch.mul), broadcasting as torch does.
#include "graph/ops/op_schemas.h"

namespace tandem {
namespace {

TensorType broadcast_binary(const std::vector<TensorType>& in, const Attributes&) {
  require_dtype(in[0], DType::float32, "the first input");
  require_dtype(in[1], DType::float32, "the second input");
  return {broadcast_shapes(in[0].shape, in[1].shape), DType::float32};
}

}  // namespace

std::vector<OpSchema> binary_schemas() {
  OpSchema add;
  add.name = "add";
  add.summary = "a + alpha * b, broadcast (torch.add)";
  add.attrs = {{"alpha", AttrType::number, 1.0}};
  add.min_inputs = add.max_inputs = 2;
  add.infer = broadcast_binary;
  OpSchema mul;
  mul.name = "mul";
  mul.summary = "a * b, broadcast (torch.mul)";
  mul.min_inputs = mul.max_inputs = 2;
  mul.infer = broadcast_binary;
  return {add, mul};
}

}  // namespace tandem
