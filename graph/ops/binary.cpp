// add (torch.add, with alpha) and mul (torch.mul), broadcasting as torch does, expand
// (torch.Tensor.expand), the broadcast of one tensor to a shape, and scale, a tensor times a
// number plus a number (torch.mul(x, 0.125), attention's q * head_dim ** -0.5; x + 1, 1 - x,
// -x).
#include <cctype>
#include <charconv>

#include "graph/ops/op_schemas.h"

namespace tandem {
namespace {

TensorType broadcast_binary(const std::vector<TensorType>& in, const Attributes&) {
  require_dtype(in[0], DType::float32, "the first input");
  require_dtype(in[1], DType::float32, "the second input");
  return {broadcast_shapes(in[0].shape, in[1].shape), DType::float32};
}

/// expand's shape entries: sizes, -1 (the input's size there) or symbol names (batch).
TensorType expand_shape(const std::vector<TensorType>& in, const Attributes& a) {
  const TensorType& x = in[0];
  const auto& items = std::get<std::vector<std::string>>(a.values().at("shape"));
  if (items.size() < x.shape.size())
    throw SchemaError("shape " + a.str() + " has fewer dimensions than the input " + sym_shape_str(x.shape) +
                      ": expand adds leading dimensions, it removes none");
  const size_t added = items.size() - x.shape.size();
  SymShape out;
  for (size_t i = 0; i < items.size(); ++i) {
    const std::string& item = items[i];
    Dim d;
    if (item == "-1") {
      if (i < added)
        throw SchemaError("-1 at dimension " + std::to_string(i) + ", which the input lacks: give its size");
      d = x.shape[i - added];
    } else if (std::isalpha(static_cast<unsigned char>(item[0])) || item[0] == '_') {
      d = Dim::symbol(item);
    } else {
      int64_t v = -1;
      auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
      if (ec != std::errc() || end != item.data() + item.size() || v < 0)
        throw SchemaError("shape entries must be sizes, -1 or symbol names; got '" + item + "'");
      d = Dim(v);
    }
    if (i >= added && !(x.shape[i - added] == d) && !(x.shape[i - added] == Dim(1)))
      throw SchemaError("cannot expand " + sym_shape_str(x.shape) + " to " + a.str() + ": dimension " +
                        std::to_string(i) + " is " + x.shape[i - added].str() + ", and only a size-1 dimension grows");
    out.push_back(d);
  }
  return {out, x.dtype};
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
  OpSchema expand;
  expand.name = "expand";
  expand.summary = "the input repeated along its size-1 dims to shape; -1 keeps a size, symbols allowed "
                   "(torch.Tensor.expand)";
  expand.attrs = {{"shape", AttrType::shape, {}, true}};
  expand.infer = [](const std::vector<TensorType>& in, const Attributes& a) {
    require_dtype(in[0], DType::float32, "the input");
    return expand_shape(in, a);
  };
  OpSchema scale;
  scale.name = "scale";
  scale.summary = "x * factor + shift, numbers (torch.mul with a number: attention's q * head_dim ** -0.5; "
                  "torch.add and torch.sub with a number)";
  scale.attrs = {{"factor", AttrType::number, {}, true}, {"shift", AttrType::number, 0.0}};
  scale.infer = [](const std::vector<TensorType>& in, const Attributes&) {
    require_dtype(in[0], DType::float32, "the input");
    return in[0];
  };
  return {add, mul, expand, scale};
}

}  // namespace tandem
