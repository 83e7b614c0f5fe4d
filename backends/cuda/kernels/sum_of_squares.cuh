// The sum of squares of a gradient on a GPU, to the bits of the host's
// (backends/optimizer_update.h): one thread per block of kNormBlock elements sums it over
// 8 lanes in the host's order, with every rounding written out (no fused multiply-add);
// the caller adds the blocks' sums in order.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace tandem::cuda {

/// Blocks of kNormBlock elements in x[0, n).
int64_t norm_blocks(int64_t n);
/// partial[b] = the sum of squares of block b of x[0, n), for b < norm_blocks(n).
void block_sums_of_squares(const float* x, int64_t n, double* partial, cudaStream_t stream);

}  // namespace tandem::cuda
