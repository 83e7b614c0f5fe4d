// Plain, obviously-correct implementations of the ops listed below: simple loops over
// output elements, accumulation in double, no threads, no oneDNN. The kernel tests compare
// the backends' kernels against these. Test support (the library tandem_test_reference,
// tests/CMakeLists.txt): no library of Tandem's holds them. Same contract as a Kernel
// (backends/kernel.h): read args.inputs and args.params with the spec's shapes, write every
// element of args.outputs. Inputs are assumed valid (the kernels, not these, check indices
// and offsets).
#pragma once

#include "backends/kernel.h"

namespace tandem::reference {

/// Runs the reference of spec.op; TANDEM_ASSERT fails for an op without one.
void forward(const KernelSpec& spec, const KernelArgs& args);

/// A tensor of `shape` seen as [outer, axis, inner] around the dimension the spec's `dim`
/// names (negative: from the end; a 0-d tensor: one of each): element (o, a, i) is at
/// (o * axis + a) * inner + i. The ops along one dimension (softmax, normalize) use it.
struct AroundDim {
  int64_t outer = 1, axis = 1, inner = 1;
};
AroundDim around_dim(const KernelSpec& spec, const Shape& shape);

void linear(const KernelSpec& spec, const KernelArgs& args);
void matmul(const KernelSpec& spec, const KernelArgs& args);
void embedding(const KernelSpec& spec, const KernelArgs& args);
void embedding_bag(const KernelSpec& spec, const KernelArgs& args);
/// Whether `op` is one of the elementwise activations activation() computes.
bool is_activation(const std::string& op);
/// relu, gelu, tanh, sigmoid, relu6, hardswish, hardsigmoid, silu, mish.
void activation(const KernelSpec& spec, const KernelArgs& args);
/// softmax, log_softmax.
void softmax(const KernelSpec& spec, const KernelArgs& args);
/// normalize: x / max(||x||_2, eps) along dim.
void normalize(const KernelSpec& spec, const KernelArgs& args);
void layer_norm(const KernelSpec& spec, const KernelArgs& args);
void dropout(const KernelSpec& spec, const KernelArgs& args);
/// add, mul.
void binary(const KernelSpec& spec, const KernelArgs& args);
void cat(const KernelSpec& spec, const KernelArgs& args);
/// flatten, reshape: an element-by-element copy.
void copy(const KernelSpec& spec, const KernelArgs& args);
/// permute: output element (i_0, ..) is the input's at i_k along dim dims[k].
void permute(const KernelSpec& spec, const KernelArgs& args);
/// pad, roll, interpolate (float32): each output element a weighted sum of input elements
/// (reference_resample.cpp), with its backward.
void resample(const KernelSpec& spec, const KernelArgs& args);
void resample_backward(const KernelSpec& spec, const BackwardArgs& args);
/// expand: each output element is the input's at its coordinates, 0 along a size-1 dim.
void expand(const KernelSpec& spec, const KernelArgs& args);
/// parameter: the output is the parameter; the input is not read. buffer: the same, bytes.
void parameter(const KernelSpec& spec, const KernelArgs& args);
/// scale: y = x * factor.
void scale(const KernelSpec& spec, const KernelArgs& args);
/// index_select: y[o, i, r] = source[o, idx[i], r] around dim.
void index_select(const KernelSpec& spec, const KernelArgs& args);

/// The backward of spec.op (reference_backward.cpp), with Kernel::backward's contract:
/// defined input gradients assigned, defined parameter gradients accumulated (+=).
/// Sums in double, from the inputs and parameters only (softmax recomputes its output).
/// TANDEM_ASSERT fails for an op without one.
void backward(const KernelSpec& spec, const BackwardArgs& args);

}  // namespace tandem::reference
