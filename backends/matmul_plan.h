// torch.matmul's shapes, shared by the CPU and CUDA backends: a 1-D a [K] is promoted to
// [1, K] and a 1-D b [K] to [K, 1] (the promoted dim is later dropped from the result,
// which leaves the memory layout unchanged), ranks are equalised, and the batch dims
// broadcast (numpy rules).
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace tandem {

struct MatmulPlan {
  Shape a, b, out;  // promoted, rank-equalised: [..., M, K], [..., K, N], [..., M, N]
  int64_t m = 0, n = 0, k = 0;
  std::vector<int64_t> batch_dims;                      // the output's batch extents
  std::vector<int64_t> batch_stride_a, batch_stride_b;  // element strides per batch dim (0 = broadcast)
  int64_t batches = 1;                                  // the product of batch_dims
  bool a_broadcast = false, b_broadcast = false;        // repeated along some batch dim of the output
};

/// The plan for inputs of shapes `a` and `b`; UserError, naming both, when they do not fit.
MatmulPlan plan_matmul(const Shape& a, const Shape& b);

}  // namespace tandem
