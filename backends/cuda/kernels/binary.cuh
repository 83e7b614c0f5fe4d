// add (y = a + alpha b) and mul (y = a b) with broadcasting, and expand (y = a broadcast;
// b unread), forward and backward, on the merged dims of a BroadcastPlan
// (backends/broadcast_plan.h).
//
//   forward:  y [numel] over `dims`; a and b read at their strides (0 = repeated)
//   backward: dx [x_numel] = scale * sum over the dims x was broadcast along of dy (add)
//             or dy * other (mul)   (assigned; one thread per element of dx, no atomics)
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace tandem::cuda {

/// The most merged dims a broadcast may have on the GPU (a plan merges all it can, so
/// this means six alternations between broadcast and not).
inline constexpr int kMaxBroadcastDims = 6;

enum class BinaryOp : int { add, mul, expand };

struct BroadcastIndexing {
  int rank = 0;
  int64_t dims[kMaxBroadcastDims] = {};
  int64_t stride_a[kMaxBroadcastDims] = {};
  int64_t stride_b[kMaxBroadcastDims] = {};
};

void binary_forward(BinaryOp op, float alpha, const BroadcastIndexing& index, const float* a, const float* b,
                    float* y, int64_t numel, cudaStream_t stream);

/// The output dims split for one input x: `kept` are the dims x advances along (in x's
/// memory order), `summed` those it was broadcast along. Per dim: its size, the output's
/// stride, and the other input's stride (for mul).
struct ReduceIndexing {
  int kept_rank = 0, summed_rank = 0;
  int64_t kept_dims[kMaxBroadcastDims] = {}, kept_out[kMaxBroadcastDims] = {}, kept_other[kMaxBroadcastDims] = {};
  int64_t summed_dims[kMaxBroadcastDims] = {}, summed_out[kMaxBroadcastDims] = {},
          summed_other[kMaxBroadcastDims] = {};
  int64_t x_numel = 0, summed_count = 1;
};

/// dx = scale * reduce(dy * other); `other` null for add.
void binary_backward(const ReduceIndexing& index, const float* dy, const float* other, float scale, float* dx,
                     cudaStream_t stream);

}  // namespace tandem::cuda
