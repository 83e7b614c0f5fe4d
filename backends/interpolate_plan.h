// interpolate's source positions, as torch 1.13 computes them on the CPU (aten's
// UpSample.h), in float: shared by the CPU kernel and, compiled for the device, the CUDA
// one, so both read the same neighbours with the same weights.
//   nearest:  src = min(floor(dst * scale), in - 1), scale = 1 / scale_factor if given,
//             else in / out (with torch's shortcuts for out == in and out == 2 in)
//   bilinear: src = align_corners ? dst * (in - 1) / (out - 1)
//                                 : max((dst + 0.5) * scale - 0.5, 0);
//             neighbours floor(src) and the next one (clamped), weights 1 - frac, frac
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "backends/dropout_mask.h"  // TANDEM_HOST_DEVICE

namespace tandem {

struct KernelSpec;

/// One spatial dim: in and out sizes, and torch's scale for it.
struct InterpolateDim {
  int64_t in = 1, out = 1;
  float scale = 1;  // in per out step (see interpolate_scale)
};

/// A source position along one dim: two neighbours and their weights (nearest: i1 == i0,
/// w1 == 0).
struct InterpolateTap {
  int64_t i0 = 0, i1 = 0;
  float w0 = 1, w1 = 0;
};

/// torch's area_pixel_compute_scale: scale_factor <= 0 means none was given.
inline float interpolate_scale(int64_t in, int64_t out, double scale_factor, bool align_corners) {
  if (align_corners) return out > 1 ? static_cast<float>(in - 1) / static_cast<float>(out - 1) : 0.0f;
  return scale_factor > 0 ? static_cast<float>(1.0 / scale_factor) : static_cast<float>(in) / static_cast<float>(out);
}

TANDEM_HOST_DEVICE inline InterpolateTap nearest_tap(const InterpolateDim& d, int64_t dst) {
  InterpolateTap t;
  if (d.out == d.in) t.i0 = dst;
  else if (d.out == 2 * d.in) t.i0 = dst >> 1;
  else {
    const auto src = static_cast<int64_t>(floorf(static_cast<float>(dst) * d.scale));
    t.i0 = src < d.in - 1 ? src : d.in - 1;
  }
  t.i1 = t.i0;
  return t;
}

TANDEM_HOST_DEVICE inline InterpolateTap linear_tap(const InterpolateDim& d, int64_t dst, bool align_corners) {
  InterpolateTap t;
  if (d.out == d.in && !align_corners) {
    t.i0 = t.i1 = dst;
    return t;
  }
  float src = align_corners ? d.scale * static_cast<float>(dst) : d.scale * (static_cast<float>(dst) + 0.5f) - 0.5f;
  if (!align_corners && src < 0) src = 0;
  t.i0 = static_cast<int64_t>(src);
  t.i1 = t.i0 + (t.i0 < d.in - 1 ? 1 : 0);
  t.w1 = src - static_cast<float>(t.i0);
  t.w0 = 1.0f - t.w1;
  return t;
}

/// The whole op: `planes` (N * C) images of up to three spatial dims, outermost first;
/// an input of fewer spatial dims has leading dims of size 1. Host only.
struct InterpolatePlan {
  int64_t planes = 0;
  InterpolateDim dims[3];
  bool bilinear = false, align_corners = false;
};

/// From the spec's shapes and attributes (mode, align_corners, scale_factor).
InterpolatePlan plan_interpolate(const KernelSpec& spec);
/// The taps of every output index along dim d of the plan.
std::vector<InterpolateTap> interpolate_taps(const InterpolatePlan& p, int d);

}  // namespace tandem
