// relu, tanh, sigmoid, gelu (exact erf form and tanh form), relu6, hardswish, hardsigmoid,
// silu, mish, exp, forward and backward, elementwise over n floats. The formulas are the CPU
// backend's (backends/cpu/ops/activations.cpp).
//
//   forward:  y [n] = f(x)
//   backward: dx [n] = dy * f'(.) (assigned): relu, relu6, tanh, sigmoid from the output y;
//             exp also from y; the others from the input x (the other pointer may be null).
// clamp: y = min(max(x, lo), hi); dx = dy where lo <= x <= hi, else 0 (torch's).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace tandem::cuda {

enum class Activation : int { relu, tanh, sigmoid, gelu_erf, gelu_tanh, relu6, hardswish, hardsigmoid, silu, mish, exp };

/// Whether backward reads the output (else the input).
constexpr bool activation_grad_from_output(Activation a) {
  return a == Activation::relu || a == Activation::tanh || a == Activation::sigmoid || a == Activation::relu6 ||
         a == Activation::exp;
}

void activation_forward(Activation act, const float* x, float* y, int64_t n, cudaStream_t stream);
void activation_backward(Activation act, const float* x, const float* y, const float* dy, float* dx, int64_t n,
                         cudaStream_t stream);
void clamp_forward(float lo, float hi, const float* x, float* y, int64_t n, cudaStream_t stream);
void clamp_backward(float lo, float hi, const float* x, const float* dy, float* dx, int64_t n, cudaStream_t stream);

}  // namespace tandem::cuda
