// dropout (torch.nn.Dropout) and stochastic_depth (torchvision.ops.stochastic_depth): the
// output has the input's type.
#include "graph/ops/op_schemas.h"

namespace tandem {
namespace {

/// Whole samples (mode row: the draw of each index along dimension 0) or the whole batch
/// (mode batch: one draw) dropped with probability p in training, the rest scaled by
/// 1 / (1 - p): a residual branch skipped at random (efficientnet, convnext, swin).
OpSchema stochastic_depth() {
  OpSchema s;
  s.name = "stochastic_depth";
  s.summary = "zeroes whole samples (mode row) or the whole batch (mode batch) with probability p in training, "
              "scaling the rest by 1/(1-p); identity in inference (torchvision.ops.stochastic_depth)";
  s.attrs = {{"p", AttrType::number, {}, true, false, {}, 0.0, 1.0},
             {"mode", AttrType::string, std::string("row"), false, false, {"row", "batch"}}};
  s.infer = [](const std::vector<TensorType>& in, const Attributes& a) {
    require_dtype(in[0], DType::float32, "the input");
    if (a.get_string("mode") == "row") require_rank_at_least(in[0], 1, "the input (mode row drops along dimension 0)");
    return in[0];
  };
  return s;
}

}  // namespace

std::vector<OpSchema> dropout_schemas() {
  OpSchema s;
  s.name = "dropout";
  s.summary = "zeroes elements with probability p in training; identity in inference (torch.nn.Dropout)";
  s.attrs = {{"p", AttrType::number, 0.5, false, false, {}, 0.0, 1.0}, {"inplace", AttrType::boolean, false}};
  s.infer = [](const std::vector<TensorType>& in, const Attributes&) {
    require_dtype(in[0], DType::float32, "the input");
    return in[0];
  };
  return {s, stochastic_depth()};
}

}  // namespace tandem
