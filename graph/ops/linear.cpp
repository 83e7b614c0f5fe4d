// linear (torch.nn.Linear).
#include <cmath>

#include "graph/ops/op_schemas.h"

namespace tandem {
namespace {

OpSchema linear() {
  OpSchema s;
  s.name = "linear";
  s.summary = "y = x W^T + b over the last dimension (torch.nn.Linear)";
  s.attrs = {{"in_features", AttrType::integer, {}, true, false, {}, 1.0},
             {"out_features", AttrType::integer, {}, true, false, {}, 1.0},
             {"bias", AttrType::boolean, true}};
  s.params = [](const Attributes& a) {
    int64_t in = a.get_int("in_features"), out = a.get_int("out_features");
    // kaiming_uniform_(a=sqrt(5)) gives U(-1/sqrt(in), 1/sqrt(in)); the bias uses the same bound
    double bound = 1.0 / std::sqrt(static_cast<double>(in));
    std::vector<ParamSpec> p{{"weight", {out, in}, {ParamInit::Kind::uniform, -bound, bound}}};
    if (a.get_bool("bias")) p.push_back({"bias", {out}, {ParamInit::Kind::uniform, -bound, bound}});
    return p;
  };
  s.infer = [](const std::vector<TensorType>& in, const Attributes& a) {
    const TensorType& x = only_input(in);
    require_dtype(x, DType::float32, "the input");
    require_rank_at_least(x, 1, "the input");
    if (!(x.shape.back() == Dim(a.get_int("in_features"))))
      throw SchemaError("the input's last dimension is " + x.shape.back().str() + " but in_features is " +
                        std::to_string(a.get_int("in_features")) + " (input shape " + sym_shape_str(x.shape) + ")");
    TensorType y = x;
    y.shape.back() = Dim(a.get_int("out_features"));
    return y;
  };
  return s;
}

}  // namespace

std::vector<OpSchema> linear_schemas() { return {linear()}; }

}  // namespace tandem
