// layer_norm (torch.nn.LayerNorm).
#include "graph/ops/op_schemas.h"

namespace tandem {

std::vector<OpSchema> layer_norm_schemas() {
  OpSchema s;
  s.name = "layer_norm";
  s.summary = "normalise over the trailing normalized_shape dimensions (torch.nn.LayerNorm)";
  s.attrs = {{"normalized_shape", AttrType::int_list, {}, true, false, {}, 1.0},
             {"eps", AttrType::number, 1e-5, false, false, {}, 0.0},
             {"elementwise_affine", AttrType::boolean, true},
             {"bias", AttrType::boolean, true}};
  s.validate = [](Attributes& a) {
    std::vector<int64_t> shape = a.get_ints("normalized_shape");
    if (shape.empty()) throw SchemaError("normalized_shape must not be empty");
    for (int64_t d : shape)
      if (d < 1) throw SchemaError("normalized_shape must hold positive sizes, got " + shape_str(shape));
    a.set("normalized_shape", shape);  // always a list from here on
    if (a.get_float("eps") <= 0) throw SchemaError("eps must be positive");
  };
  s.params = [](const Attributes& a) {
    std::vector<ParamSpec> p;
    if (!a.get_bool("elementwise_affine")) return p;
    Shape shape = a.get_ints("normalized_shape");
    p.push_back({"weight", shape, {ParamInit::Kind::ones}});
    if (a.get_bool("bias")) p.push_back({"bias", shape, {ParamInit::Kind::zeros}});
    return p;
  };
  s.infer = [](const std::vector<TensorType>& in, const Attributes& a) {
    const TensorType& x = in[0];
    require_dtype(x, DType::float32, "the input");
    std::vector<int64_t> norm = a.get_ints("normalized_shape");
    bool ok = x.shape.size() >= norm.size();
    for (size_t i = 0; ok && i < norm.size(); ++i)
      ok = x.shape[x.shape.size() - norm.size() + i] == Dim(norm[i]);
    if (!ok)
      throw SchemaError("the input's trailing dimensions " + sym_shape_str(x.shape) + " do not end with normalized_shape " +
                        shape_str(norm));
    return x;
  };
  return {s};
}

}  // namespace tandem
