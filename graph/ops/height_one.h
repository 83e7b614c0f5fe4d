// torch's 1-D convolution, pooling and batch norm as their 2-D ops over a height of 1.
//
// [N, C, L] is [N, C, 1, L] in the same memory (and batch_norm1d's [N, C] is [N, C, 1, 1]),
// and a window of k along L is a window of 1 x k; so conv1d, max_pool1d, avg_pool1d and
// batch_norm1d are conv2d, max_pool2d, avg_pool2d and batch_norm2d on those views. Their
// schemas (height_one.cpp) check the 1-D shapes and attributes themselves and infer through
// the 2-D geometry; every backend runs the 2-D op's kernel on views of the same memory
// (backends/height_one_kernel.h). The 1-D ops so take every path the 2-D ones have
// (oneDNN's and cuDNN's primitives, backward, bf16) and cannot disagree with them.
#pragma once

#include <string>
#include <string_view>

#include "core/tensor.h"
#include "graph/attributes.h"

namespace tandem {

/// The 2-D op that computes the 1-D op `op` ("conv1d": "conv2d"); empty for any other op.
std::string two_d_op(std::string_view op);
/// The 2-D op's attributes for the 1-D op's: kernel_size, stride, padding and dilation [k]
/// become [1, k] (padding [p] becomes [0, p]; 'same', 'valid' and a null stride stay); the
/// others are copied.
Attributes two_d_attributes(const Attributes& one_d);
/// An input's or output's shape as the 2-D op sees it: [.., C, L] as [.., C, 1, L], and
/// batch_norm1d's [N, C] as [N, C, 1, 1].
Shape two_d_shape(std::string_view op, const Shape& one_d);
/// A parameter's shape as the 2-D op sees it: conv1d's weight [O, C/g, k] as
/// [O, C/g, 1, k]; the others are unchanged.
Shape two_d_param_shape(std::string_view op, size_t index, const Shape& one_d);

}  // namespace tandem
