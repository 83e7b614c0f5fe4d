// The spatial geometry shared by conv2d, max_pool2d and avg_pool2d: a window of
// kernel x kernel elements, moved by stride over the input padded by pad_l before and
// pad_r after, its taps dilation apart. The schemas use it to infer output shapes and the
// CPU kernels to describe the same geometry to oneDNN, so the two cannot disagree.
#pragma once

#include <array>
#include <cstdint>

#include "graph/attributes.h"
#include "graph/op_schema.h"

namespace tandem {

/// Per spatial dimension, index 0 is the height and 1 the width.
struct Window2d {
  std::array<int64_t, 2> kernel{1, 1}, stride{1, 1}, dilation{1, 1}, pad_l{0, 0}, pad_r{0, 0};
  bool ceil_mode = false;

  /// torch's output size for an input of `in` (height, width); throws SchemaError when the
  /// (dilated) window is larger than the padded input.
  std::array<int64_t, 2> output_size(std::array<int64_t, 2> in) const;
  /// The padding after the input that makes a floor-mode window sweep give output_size(in):
  /// larger than pad_r where ceil_mode adds a last, partial window (what oneDNN needs).
  std::array<int64_t, 2> effective_pad_r(std::array<int64_t, 2> in) const;
};

/// An attribute given as an int or as [h, w], as a pair; throws SchemaError otherwise.
std::array<int64_t, 2> pair_attr(const Attributes& a, const std::string& name);
/// conv2d's geometry from kernel_size, stride, padding (ints, or 'same' / 'valid'), dilation.
Window2d conv2d_window(const Attributes& a);
/// max_pool2d's and avg_pool2d's geometry from kernel_size, stride (null: kernel_size),
/// padding, dilation (max_pool2d only) and ceil_mode.
Window2d pool2d_window(const Attributes& a);

/// The image of a [N, C, H, W] or unbatched [C, H, W] input: checks float32, the rank,
/// that C equals `channels` (when >= 0) and that H and W are integers (a window sweep over
/// a symbolic size has no symbolic form here); throws SchemaError naming `channels_attr`.
std::array<int64_t, 2> image_size(const TensorType& x, int64_t channels, const std::string& channels_attr);

}  // namespace tandem
