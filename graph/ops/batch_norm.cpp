// batch_norm2d (torch.nn.BatchNorm2d).
#include "graph/ops/op_schemas.h"

namespace tandem {
namespace {

OpSchema batch_norm2d() {
  OpSchema s;
  s.name = "batch_norm2d";
  s.summary = "normalise each channel of [N, C, H, W] over N, H, W; running statistics for eval (torch.nn.BatchNorm2d)";
  s.attrs = {{"num_features", AttrType::integer, {}, true, false, {}, 1.0},
             {"eps", AttrType::number, 1e-5, false, false, {}, 0.0},
             {"momentum", AttrType::number, 0.1, false, true, {}, 0.0, 1.0},  // null: cumulative average
             {"affine", AttrType::boolean, true},
             {"track_running_stats", AttrType::boolean, true}};
  s.validate = [](Attributes& a) {
    if (a.get_float("eps") <= 0) throw SchemaError("eps must be positive");
  };
  s.params = [](const Attributes& a) {
    // torch's state_dict order: weight, bias, then the buffers
    const int64_t c = a.get_int("num_features");
    std::vector<ParamSpec> p;
    if (a.get_bool("affine")) {
      p.push_back({"weight", {c}, {ParamInit::Kind::ones}});
      p.push_back({"bias", {c}, {ParamInit::Kind::zeros}});
    }
    if (a.get_bool("track_running_stats")) {
      p.push_back({"running_mean", {c}, {ParamInit::Kind::zeros}, false});
      p.push_back({"running_var", {c}, {ParamInit::Kind::ones}, false});
      p.push_back({"num_batches_tracked", {}, {ParamInit::Kind::zeros}, false, DType::int64});
    }
    return p;
  };
  s.infer = [](const std::vector<TensorType>& in, const Attributes& a) {
    const TensorType& x = only_input(in);
    require_dtype(x, DType::float32, "the input");
    if (x.shape.size() != 4) throw SchemaError("the input must be [N, C, H, W], got shape " + sym_shape_str(x.shape));
    if (!(x.shape[1] == Dim(a.get_int("num_features"))))
      throw SchemaError("the input has " + x.shape[1].str() + " channels (dimension 1 of " + sym_shape_str(x.shape) +
                        ") but num_features is " + std::to_string(a.get_int("num_features")));
    return x;
  };
  return s;
}

}  // namespace

std::vector<OpSchema> batch_norm_schemas() { return {batch_norm2d()}; }

}  // namespace tandem
