// layer_norm over the last `cols` elements of each of `rows` rows, forward and backward,
// with the CPU backend's formulas (backends/cpu/ops/layer_norm.cpp): mean, then the biased
// variance of the deviations (two passes, so a large mean does not cancel the variance).
//
//   forward:  y [R, C] = (x - mean) rstd * weight + bias   (weight, bias [C], either null)
//   backward, xhat = (x - mean) rstd, g = dy * weight:
//     dx      = rstd (g - mean_C(g) - xhat mean_C(g xhat))   (assigned)
//     dweight += sum_R(dy xhat);  dbias += sum_R(dy)          (accumulated)
// mean and rstd are recomputed from x, so forward keeps nothing. The parameter gradients
// are summed over chunks of rows into a scratch of partial sums, then the chunks into
// dweight and dbias: every column gets many threads, and the order of the sum is fixed.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace tandem::cuda {

struct LayerNormShape {
  int64_t rows = 0, cols = 0;
  float eps = 1e-5f;
};

void layer_norm_forward(const LayerNormShape& shape, const float* x, const float* weight, const float* bias, float* y,
                        cudaStream_t stream);

/// Floats of scratch layer_norm_backward needs.
size_t layer_norm_backward_scratch(const LayerNormShape& shape);

/// dx, dweight, dbias may each be null (not wanted); weight null: no affine.
void layer_norm_backward(const LayerNormShape& shape, const float* x, const float* weight, const float* dy, float* dx,
                         float* dweight, float* dbias, float* scratch, cudaStream_t stream);

}  // namespace tandem::cuda
