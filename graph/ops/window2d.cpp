#include "graph/ops/window2d.h"

#include <algorithm>
#include <string>

#include "graph/op_schema.h"

namespace tandem {
namespace {

const char* kDimNames[2] = {"height", "width"};

/// padding given as a word ('same', 'valid'), or "" when it is ints.
std::string padding_word(const Attributes& a) {
  const AttrValue& v = a.values().at("padding");
  return std::holds_alternative<std::string>(v) ? std::get<std::string>(v) : std::string();
}

}  // namespace

std::array<int64_t, 2> pair_attr(const Attributes& a, const std::string& name) {
  std::vector<int64_t> v = a.get_ints(name);
  if (v.size() == 1) return {v[0], v[0]};
  if (v.size() == 2) return {v[0], v[1]};
  throw SchemaError(name + " must be an int or a list of two ints [h, w], got " + shape_str(v));
}

std::array<int64_t, 2> Window2d::output_size(std::array<int64_t, 2> in) const {
  std::array<int64_t, 2> out{};
  for (int d = 0; d < 2; ++d) {
    const int64_t span = dilation[d] * (kernel[d] - 1) + 1;
    const int64_t padded = in[d] + pad_l[d] + pad_r[d];
    if (span > padded)
      throw SchemaError("the " + std::string(kDimNames[d]) + " of the input is " + std::to_string(in[d]) +
                        " (" + std::to_string(padded) + " padded) but the window spans " + std::to_string(span) +
                        " (kernel " + std::to_string(kernel[d]) + ", dilation " + std::to_string(dilation[d]) +
                        "): the output would be empty");
    // torch's pooling_output_shape: a ceil-mode last window must start inside the input
    // or its left padding
    int64_t n = (padded - span + (ceil_mode ? stride[d] - 1 : 0)) / stride[d] + 1;
    if (ceil_mode && (n - 1) * stride[d] >= in[d] + pad_l[d]) --n;
    out[d] = n;
  }
  return out;
}

std::array<int64_t, 2> Window2d::effective_pad_r(std::array<int64_t, 2> in) const {
  std::array<int64_t, 2> out = output_size(in), pad{};
  for (int d = 0; d < 2; ++d) {
    const int64_t span = dilation[d] * (kernel[d] - 1) + 1;
    pad[d] = std::max(pad_r[d], (out[d] - 1) * stride[d] + span - in[d] - pad_l[d]);
  }
  return pad;
}

Window2d conv2d_window(const Attributes& a) {
  Window2d w;
  w.kernel = pair_attr(a, "kernel_size");
  w.stride = pair_attr(a, "stride");
  w.dilation = pair_attr(a, "dilation");
  for (int d = 0; d < 2; ++d)
    if (w.kernel[d] < 1 || w.stride[d] < 1 || w.dilation[d] < 1)
      throw SchemaError("kernel_size, stride and dilation must be positive");
  if (padding_word(a) == "valid") return w;
  if (padding_word(a) == "same") {
    if (w.stride != std::array<int64_t, 2>{1, 1})
      throw SchemaError("padding 'same' needs stride 1 (as torch: it is not supported for strided convolutions)");
    for (int d = 0; d < 2; ++d) {  // torch puts the odd element of the total padding after
      const int64_t total = w.dilation[d] * (w.kernel[d] - 1);
      w.pad_l[d] = total / 2;
      w.pad_r[d] = total - total / 2;
    }
    return w;
  }
  w.pad_l = w.pad_r = pair_attr(a, "padding");
  if (w.pad_l[0] < 0 || w.pad_l[1] < 0) throw SchemaError("padding must not be negative");
  return w;
}

Window2d pool2d_window(const Attributes& a) {
  Window2d w;
  w.kernel = pair_attr(a, "kernel_size");
  w.stride = a.is_null("stride") ? w.kernel : pair_attr(a, "stride");
  if (a.has("dilation")) w.dilation = pair_attr(a, "dilation");
  w.pad_l = w.pad_r = pair_attr(a, "padding");
  w.ceil_mode = a.get_bool("ceil_mode");
  for (int d = 0; d < 2; ++d) {
    if (w.kernel[d] < 1 || w.stride[d] < 1 || w.dilation[d] < 1)
      throw SchemaError("kernel_size, stride and dilation must be positive");
    if (w.pad_l[d] < 0 || w.pad_l[d] > w.kernel[d] / 2)  // torch's rule, in both dimensions
      throw SchemaError("padding must be between 0 and half the kernel size; got padding " +
                        std::to_string(w.pad_l[d]) + " for kernel size " + std::to_string(w.kernel[d]));
  }
  return w;
}

std::array<int64_t, 2> image_size(const TensorType& x, int64_t channels, const std::string& channels_attr) {
  if (x.dtype != DType::float32) throw SchemaError("the input must be float32, got " + std::string(dtype_name(x.dtype)));
  const size_t rank = x.shape.size();
  if (rank != 3 && rank != 4)
    throw SchemaError("the input must be [N, C, H, W] (or unbatched [C, H, W]), got shape " + sym_shape_str(x.shape));
  const Dim& c = x.shape[rank - 3];
  if (channels >= 0 && !(c == Dim(channels)))
    throw SchemaError("the input has " + c.str() + " channels (dimension " + std::to_string(rank - 3) + " of " +
                      sym_shape_str(x.shape) + ") but " + channels_attr + " is " + std::to_string(channels));
  std::array<int64_t, 2> hw{};
  for (int d = 0; d < 2; ++d) {
    const Dim& dim = x.shape[rank - 2 + d];
    if (!dim.is_constant())
      throw SchemaError("the input's " + std::string(kDimNames[d]) + " is the symbol " + dim.str() + " (shape " +
                        sym_shape_str(x.shape) + "); give it as an integer: the output size depends on it");
    hw[d] = dim.constant();
  }
  return hw;
}

}  // namespace tandem
