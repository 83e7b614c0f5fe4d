// Small elementwise kernels over n floats that several ops and the collectives share:
// fill, scale, accumulate (dropout's masking is kernels/dropout.cuh).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace tandem::cuda {

/// y [n] = value
void fill(float* y, float value, int64_t n, cudaStream_t stream);
/// y [n] *= factor; a factor of 0 writes zeros (no 0 * inf = NaN), as the CPU's scale
void scale(float* y, float factor, int64_t n, cudaStream_t stream);
/// y [n] += alpha * x   (gradient sums; the all-reduce of replicas on one GPU)
void accumulate(float* y, const float* x, float alpha, int64_t n, cudaStream_t stream);

}  // namespace tandem::cuda
