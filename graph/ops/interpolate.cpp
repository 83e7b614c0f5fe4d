// interpolate (torch.nn.functional.interpolate, nn.Upsample): resize the spatial dims (all
// but the first two) to `size`, or by `scale_factor`, mode nearest (1 to 3 spatial dims)
// or bilinear (2). With scale_factor the output is floor(in * scale) and, as torch does
// unless recompute_scale_factor, the source positions use the scale itself, not in / out.
#include <cmath>

#include "graph/ops/op_schemas.h"

namespace tandem {
namespace {

OpSchema interpolate() {
  OpSchema s;
  s.name = "interpolate";
  s.summary = "resize the spatial dims by nearest or bilinear interpolation (torch.nn.functional.interpolate)";
  s.attrs = {{"size", AttrType::int_list, {}, false, true},
             {"scale_factor", AttrType::number, {}, false, true},
             {"mode", AttrType::string, std::string("nearest"), false, false, {"nearest", "bilinear"}},
             {"align_corners", AttrType::boolean, false}};
  s.validate = [](Attributes& a) {
    if (a.is_null("size") == a.is_null("scale_factor"))
      throw SchemaError("give one of size and scale_factor (as torch)");
    if (!a.is_null("scale_factor") && !(a.get_float("scale_factor") > 0))
      throw SchemaError("scale_factor must be positive; got " + std::to_string(a.get_float("scale_factor")));
    if (!a.is_null("size"))
      for (int64_t v : a.get_ints("size"))
        if (v < 1) throw SchemaError("size entries must be at least 1; got " + std::to_string(v));
    if (a.get_bool("align_corners") && a.get_string("mode") == "nearest")
      throw SchemaError("align_corners applies to mode bilinear only (torch refuses it with nearest)");
  };
  s.infer = [](const std::vector<TensorType>& in, const Attributes& a) {
    const TensorType& x = in[0];
    require_dtype(x, DType::float32, "the input");
    const size_t rank = x.shape.size();
    const bool bilinear = a.get_string("mode") == "bilinear";
    if (bilinear ? rank != 4 : (rank < 3 || rank > 5))
      throw SchemaError("mode " + a.get_string("mode") + " takes an input of " +
                        (bilinear ? std::string("rank 4 [N, C, H, W]") : std::string("rank 3 to 5 [N, C, ...]")) +
                        ", got " + sym_shape_str(x.shape));
    const size_t spatial = rank - 2;
    TensorType out = x;
    if (!a.is_null("size")) {
      std::vector<int64_t> size = a.get_ints("size");
      if (size.size() == 1) size.assign(spatial, size[0]);
      if (size.size() != spatial)
        throw SchemaError("size has " + std::to_string(size.size()) + " entries for the " + std::to_string(spatial) +
                          " spatial dims of " + sym_shape_str(x.shape));
      for (size_t d = 0; d < spatial; ++d) out.shape[2 + d] = Dim(size[d]);
      return out;
    }
    const double scale = a.get_float("scale_factor");
    for (size_t d = 2; d < rank; ++d) {
      if (!x.shape[d].is_constant())
        throw SchemaError("scale_factor needs fixed spatial sizes; dimension " + std::to_string(d) + " is " +
                          x.shape[d].str() + " (give size instead)");
      const auto n = static_cast<int64_t>(std::floor(static_cast<double>(x.shape[d].constant()) * scale));
      if (n < 1)
        throw SchemaError("scale_factor " + std::to_string(scale) + " makes dimension " + std::to_string(d) + " (" +
                          x.shape[d].str() + ") empty");
      out.shape[d] = Dim(n);
    }
    return out;
  };
  return s;
}

}  // namespace

std::vector<OpSchema> interpolate_schemas() { return {interpolate()}; }

}  // namespace tandem
