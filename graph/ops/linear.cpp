// linear (torch.nn.Linear) and matmul (torch.matmul).
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

OpSchema matmul() {
  OpSchema s;
  s.name = "matmul";
  s.summary = "matrix product with torch.matmul's rules (1-D promotion, broadcast batch dimensions)";
  s.min_inputs = s.max_inputs = 2;
  s.infer = [](const std::vector<TensorType>& in, const Attributes&) {
    require_dtype(in[0], DType::float32, "the first input");
    require_dtype(in[1], DType::float32, "the second input");
    require_rank_at_least(in[0], 1, "the first input");
    require_rank_at_least(in[1], 1, "the second input");
    SymShape a = in[0].shape, b = in[1].shape;
    bool a_vector = a.size() == 1, b_vector = b.size() == 1;
    if (a_vector) a.insert(a.begin(), Dim(1));
    if (b_vector) b.push_back(Dim(1));
    const Dim& k_a = a.back();
    const Dim& k_b = b[b.size() - 2];
    if (!(k_a == k_b))
      throw SchemaError("cannot multiply shapes " + sym_shape_str(in[0].shape) + " and " + sym_shape_str(in[1].shape) +
                        ": inner dimensions " + k_a.str() + " and " + k_b.str() + " differ");
    SymShape batch_a(a.begin(), a.end() - 2), batch_b(b.begin(), b.end() - 2);
    SymShape out = broadcast_shapes(batch_a, batch_b);
    if (!a_vector) out.push_back(a[a.size() - 2]);
    if (!b_vector) out.push_back(b.back());
    return TensorType{out, DType::float32};
  };
  return s;
}

}  // namespace

std::vector<OpSchema> linear_schemas() { return {linear(), matmul()}; }

}  // namespace tandem
