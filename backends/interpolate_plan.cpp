#include "backends/interpolate_plan.h"

#include "backends/kernel.h"
#include "backends/op_args.h"

namespace tandem {

InterpolatePlan plan_interpolate(const KernelSpec& spec) {
  const Shape& in = spec.inputs.at(0).shape;
  const Shape& out = spec.outputs.at(0).shape;
  TANDEM_ASSERT(in.size() >= 3 && in.size() <= 5 && out.size() == in.size(),
                "interpolate: the schema should have refused " + shape_str(in) + " -> " + shape_str(out));
  InterpolatePlan p;
  p.planes = in[0] * in[1];
  p.bilinear = spec.attrs->get_string("mode") == "bilinear";
  p.align_corners = spec.attrs->get_bool("align_corners");
  const double scale_factor = spec.attrs->is_null("scale_factor") ? 0.0 : spec.attrs->get_float("scale_factor");
  const size_t spatial = in.size() - 2, first = 3 - spatial;
  for (size_t k = 0; k < spatial; ++k) {
    InterpolateDim& d = p.dims[first + k];
    d.in = in[2 + k];
    d.out = out[2 + k];
    d.scale = interpolate_scale(d.in, d.out, scale_factor, p.align_corners);
  }
  return p;
}

std::vector<InterpolateTap> interpolate_taps(const InterpolatePlan& p, int d) {
  std::vector<InterpolateTap> taps(static_cast<size_t>(p.dims[d].out));
  for (int64_t i = 0; i < p.dims[d].out; ++i)
    taps[i] = p.bilinear ? linear_tap(p.dims[d], i, p.align_corners) : nearest_tap(p.dims[d], i);
  return taps;
}

}  // namespace tandem
