// matmul (torch.matmul).
#include "graph/ops/op_schemas.h"

namespace tandem {
namespace {

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

std::vector<OpSchema> matmul_schemas() { return {matmul()}; }

}  // namespace tandem
