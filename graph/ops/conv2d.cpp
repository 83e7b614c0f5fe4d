// conv2d (torch.nn.Conv2d).
#include <cmath>

#include "graph/ops/op_schemas.h"
#include "graph/ops/window2d.h"

namespace tandem {

std::vector<OpSchema> conv2d_schemas() {
  OpSchema s;
  s.name = "conv2d";
  s.summary = "2-D cross-correlation over [N, C, H, W] with stride, padding, dilation and groups (torch.nn.Conv2d)";
  s.attrs = {{"in_channels", AttrType::integer, {}, true, false, {}, 1.0},
             {"out_channels", AttrType::integer, {}, true, false, {}, 1.0},
             {"kernel_size", AttrType::int_list, {}, true, false, {}, 1.0},
             {"stride", AttrType::int_list, int64_t{1}, false, false, {}, 1.0},
             {"padding", AttrType::int_list, int64_t{0}, false, false, {"same", "valid"}, 0.0},
             {"dilation", AttrType::int_list, int64_t{1}, false, false, {}, 1.0},
             {"groups", AttrType::integer, int64_t{1}, false, false, {}, 1.0},
             {"bias", AttrType::boolean, true},
             {"padding_mode", AttrType::string, std::string("zeros"), false, false, {"zeros"}}};
  s.validate = [](Attributes& a) {
    const int64_t in = a.get_int("in_channels"), out = a.get_int("out_channels"), groups = a.get_int("groups");
    if (in % groups != 0)
      throw SchemaError("in_channels " + std::to_string(in) + " is not divisible by groups " + std::to_string(groups));
    if (out % groups != 0)
      throw SchemaError("out_channels " + std::to_string(out) + " is not divisible by groups " + std::to_string(groups));
    conv2d_window(a);  // throws on bad sizes or 'same' with a stride
  };
  s.params = [](const Attributes& a) {
    const int64_t in = a.get_int("in_channels"), out = a.get_int("out_channels"), groups = a.get_int("groups");
    const std::array<int64_t, 2> k = pair_attr(a, "kernel_size");
    // reset_parameters: kaiming_uniform_(a=sqrt(5)) is U(-1/sqrt(fan_in), 1/sqrt(fan_in)), and the
    // bias uses the same bound; fan_in = in_channels / groups * kh * kw
    const double bound = 1.0 / std::sqrt(static_cast<double>(in / groups * k[0] * k[1]));
    std::vector<ParamSpec> p{{"weight", {out, in / groups, k[0], k[1]}, {ParamInit::Kind::uniform, -bound, bound}}};
    if (a.get_bool("bias")) p.push_back({"bias", {out}, {ParamInit::Kind::uniform, -bound, bound}});
    return p;
  };
  s.infer = [](const std::vector<TensorType>& in, const Attributes& a) {
    const TensorType& x = only_input(in);
    std::array<int64_t, 2> out = conv2d_window(a).output_size(image_size(x, a.get_int("in_channels"), "in_channels"));
    TensorType y = x;
    const size_t rank = x.shape.size();
    y.shape[rank - 3] = Dim(a.get_int("out_channels"));
    y.shape[rank - 2] = Dim(out[0]);
    y.shape[rank - 1] = Dim(out[1]);
    return y;
  };
  return {s};
}

}  // namespace tandem
