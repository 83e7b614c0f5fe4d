// sum, mean, amax and amin over dimensions on a GPU (graph/ops/reduce.h), in the geometry of
// backends/reduce_geometry.h: the input's dimensions merged into alternating kept and
// reduced ones.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace tandem::cuda {

/// The most merged dimensions (kept or reduced) a reduction takes on a GPU: alternating
/// kept and reduced dimensions of a rank-8 tensor at most.
inline constexpr int kMaxReduceDims = 8;

enum class ReduceKind { sum, mean, amax, amin };

struct ReduceShape {
  ReduceKind kind = ReduceKind::sum;
  int kept = 0, reduced = 0;  // how many merged dimensions of each
  int64_t kept_sizes[kMaxReduceDims] = {}, kept_x_strides[kMaxReduceDims] = {};
  int64_t reduced_sizes[kMaxReduceDims] = {}, reduced_x_strides[kMaxReduceDims] = {};
  /// All merged dimensions in order, with the output's stride along each (0: reduced).
  int rank = 0;
  int64_t sizes[2 * kMaxReduceDims] = {}, y_strides[2 * kMaxReduceDims] = {};
  int64_t count = 1, x_numel = 0, y_numel = 0;
};

/// y from x: each output element over its `count` input elements (count >= 1).
void reduce_forward(const ReduceShape& s, const float* x, float* y, cudaStream_t stream);
/// dx from dy (and for amax, amin: x, y, and `ties`, y_numel floats of scratch).
void reduce_backward(const ReduceShape& s, const float* x, const float* y, const float* dy, float* dx, float* ties,
                     cudaStream_t stream);

}  // namespace tandem::cuda
