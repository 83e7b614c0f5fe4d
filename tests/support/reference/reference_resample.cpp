// Reference pad, roll and interpolate, forward and backward: each output element is a
// weighted sum of input elements (one element of weight 1 for pad, roll and nearest; four
// for bilinear; none where pad fills), written out here coordinate by coordinate from
// torch's definitions, and both directions use that one list of taps.
#include <cmath>
#include <utility>
#include <vector>

#include "tests/support/reference/reference_ops.h"

namespace tandem::reference {
namespace {

using Taps = std::vector<std::pair<int64_t, double>>;  // (input flat index, weight)

std::vector<int64_t> coords(const Shape& shape, int64_t e) {
  std::vector<int64_t> c(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    c[d] = e % shape[d];
    e /= shape[d];
  }
  return c;
}

int64_t flat(const Shape& shape, const std::vector<int64_t>& c) {
  int64_t off = 0;
  for (size_t d = 0; d < shape.size(); ++d) off = off * shape[d] + c[d];
  return off;
}

Taps pad_taps(const KernelSpec& spec, const Shape& in, const Shape& out, int64_t e) {
  std::vector<int64_t> c = coords(out, e);
  const std::vector<int64_t> pad = spec.attrs->get_ints("pad");  // (before, after), last dim first
  for (size_t k = 0; k < pad.size() / 2; ++k) {
    const size_t d = in.size() - 1 - k;
    c[d] -= pad[2 * k];
    if (c[d] < 0 || c[d] >= in[d]) return {};
  }
  return {{flat(in, c), 1.0}};
}

Taps roll_taps(const KernelSpec& spec, const Shape& in, int64_t e) {
  const std::vector<int64_t> shifts = spec.attrs->get_ints("shifts");
  auto wrap = [](int64_t i, int64_t n) { return ((i % n) + n) % n; };
  if (spec.attrs->is_null("dims")) return {{wrap(e - shifts[0], shape_numel(in)), 1.0}};
  std::vector<int64_t> c = coords(in, e);
  const std::vector<int64_t> dims = spec.attrs->get_ints("dims");
  for (size_t k = 0; k < dims.size(); ++k) {
    const size_t d = static_cast<size_t>(dims[k] < 0 ? dims[k] + static_cast<int64_t>(in.size()) : dims[k]);
    c[d] = wrap(c[d] - shifts[k], in[d]);
  }
  return {{flat(in, c), 1.0}};
}

/// One spatial dim's source taps for output index o, torch 1.13's formulas in float.
std::vector<std::pair<int64_t, double>> dim_taps(const KernelSpec& spec, int64_t in, int64_t out, int64_t o) {
  const bool align = spec.attrs->get_bool("align_corners");
  const bool given = !spec.attrs->is_null("scale_factor");
  const double factor = given ? spec.attrs->get_float("scale_factor") : 0.0;
  const float scale = align ? (out > 1 ? static_cast<float>(in - 1) / static_cast<float>(out - 1) : 0.0f)
                            : (given ? static_cast<float>(1.0 / factor) : static_cast<float>(in) / static_cast<float>(out));
  if (spec.attrs->get_string("mode") == "nearest") {
    if (out == in) return {{o, 1.0}};
    if (out == 2 * in) return {{o / 2, 1.0}};  // torch's shortcut, whatever the scale_factor
    return {{std::min(static_cast<int64_t>(std::floor(static_cast<float>(o) * scale)), in - 1), 1.0}};
  }
  if (out == in && !align) return {{o, 1.0}};
  const float src = align ? scale * static_cast<float>(o) : std::max(scale * (static_cast<float>(o) + 0.5f) - 0.5f, 0.0f);
  const auto i0 = static_cast<int64_t>(src);
  const int64_t i1 = std::min(i0 + 1, in - 1);
  const double w1 = static_cast<double>(src - static_cast<float>(i0));
  return {{i0, 1.0 - w1}, {i1, w1}};
}

Taps interpolate_taps(const KernelSpec& spec, const Shape& in, const Shape& out, int64_t e) {
  const std::vector<int64_t> c = coords(out, e);
  Taps taps = {{c[0] * in[1] + c[1], 1.0}};  // the image, then each spatial dim in turn
  for (size_t d = 2; d < in.size(); ++d) {
    Taps next;
    for (const auto& [base, w] : taps)
      for (const auto& [i, wd] : dim_taps(spec, in[d], out[d], c[d])) next.push_back({base * in[d] + i, w * wd});
    taps = std::move(next);
  }
  return taps;
}

Taps taps_of(const KernelSpec& spec, const Shape& in, const Shape& out, int64_t e) {
  if (spec.op == "pad") return pad_taps(spec, in, out, e);
  if (spec.op == "roll") return roll_taps(spec, in, e);
  return interpolate_taps(spec, in, out, e);
}

}  // namespace

void resample(const KernelSpec& spec, const KernelArgs& args) {
  const Shape& in = args.inputs[0].shape();
  const Shape& out = args.outputs[0].shape();
  if (args.inputs[0].dtype() == DType::int64) {  // roll moves any dtype: one tap of weight 1
    const int64_t* x = args.inputs[0].data<int64_t>();
    int64_t* y = args.outputs[0].data<int64_t>();
    for (int64_t e = 0; e < args.outputs[0].numel(); ++e) y[e] = x[taps_of(spec, in, out, e).at(0).first];
    return;
  }
  const float* x = args.inputs[0].data<float>();
  float* y = args.outputs[0].data<float>();
  const double fill = spec.op == "pad" ? spec.attrs->get_float("value") : 0.0;
  for (int64_t e = 0; e < args.outputs[0].numel(); ++e) {
    const Taps taps = taps_of(spec, in, out, e);
    double v = taps.empty() ? fill : 0.0;
    for (const auto& [i, w] : taps) v += w * x[i];
    y[e] = static_cast<float>(v);
  }
}

void resample_backward(const KernelSpec& spec, const BackwardArgs& args) {
  if (!args.grad_inputs[0].defined()) return;
  const Shape& in = args.inputs[0].shape();
  const Shape& out = args.grad_outputs[0].shape();
  const float* dy = args.grad_outputs[0].data<float>();
  std::vector<double> dx(static_cast<size_t>(args.inputs[0].numel()), 0.0);
  for (int64_t e = 0; e < args.grad_outputs[0].numel(); ++e)
    for (const auto& [i, w] : taps_of(spec, in, out, e)) dx[i] += w * dy[e];
  float* g = args.grad_inputs[0].data<float>();
  for (size_t i = 0; i < dx.size(); ++i) g[i] = static_cast<float>(dx[i]);
}

}  // namespace tandem::reference
