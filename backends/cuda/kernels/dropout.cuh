// Dropout's masking over n floats on a GPU: the dropout layer's forward and backward, and
// the dropouts inside other layers (between a recurrent layer's stacked layers, on
// attention weights).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace tandem::cuda {

/// out [n] = in * keep(seed, i / group) / (1 - p), the mask of backends/dropout_mask.h, so
/// that a seed drops the same elements on the CPU and on a GPU (`group` consecutive
/// elements share a draw: stochastic depth's samples). 0 < p < 1.
void dropout_mask_apply(const float* in, float* out, int64_t n, float p, uint64_t seed, cudaStream_t stream,
                        int64_t group = 1);

}  // namespace tandem::cuda
