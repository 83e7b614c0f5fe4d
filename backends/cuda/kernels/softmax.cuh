// softmax and log_softmax over the middle dim of a tensor viewed as [outer, axis, inner],
// forward and backward, with the CPU backend's formulas (backends/cpu/ops/softmax.cpp).
//
//   forward:  y = exp(x - max) / sum(exp(x - max))   or   y = x - max - log(sum(exp(x - max)))
//   backward (from y only, assigned):
//     softmax:     dx = y (dy - sum_axis(dy y))
//     log_softmax: dx = dy - exp(y) sum_axis(dy)
// inner = 1 (the last dim): a block per row, reductions across its threads; else a thread
// per lane (outer, inner), whose neighbours read neighbouring addresses.
//
// normalize (F.normalize, p = 2) over the same view: y = x / max(||x||, eps) per lane;
// backward from x (assigned): dx = (dy - x sum(dy x) / ||x||^2) / ||x|| where ||x|| >= eps,
// else dy / eps. A thread per lane (swin v2's lanes are 32 long).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace tandem::cuda {

struct SoftmaxShape {
  int64_t outer = 1, axis = 1, inner = 1;
};

void softmax_forward(bool log, const SoftmaxShape& shape, const float* x, float* y, cudaStream_t stream);
void softmax_backward(bool log, const SoftmaxShape& shape, const float* y, const float* dy, float* dx,
                      cudaStream_t stream);
void normalize_forward(const SoftmaxShape& shape, float eps, const float* x, float* y, cudaStream_t stream);
void normalize_backward(const SoftmaxShape& shape, float eps, const float* x, const float* dy, float* dx,
                        cudaStream_t stream);

}  // namespace tandem::cuda
