// relu, tanh, sigmoid, gelu (exact erf form and tanh form), forward and backward,
// elementwise over n floats. The formulas are the CPU backend's (backends/cpu/ops/activations.cpp).
//
//   forward:  y [n] = f(x)
//   backward: dx [n] = dy * f'(.) (assigned): relu, tanh, sigmoid from the output y;
//             gelu from the input x (the other pointer may be null).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace tandem::cuda {

enum class Activation : int { relu, tanh, sigmoid, gelu_erf, gelu_tanh };

/// Whether backward reads the output (else the input).
constexpr bool activation_grad_from_output(Activation a) {
  return a != Activation::gelu_erf && a != Activation::gelu_tanh;
}

void activation_forward(Activation act, const float* x, float* y, int64_t n, cudaStream_t stream);
void activation_backward(Activation act, const float* x, const float* y, const float* dy, float* dx, int64_t n,
                         cudaStream_t stream);

}  // namespace tandem::cuda
