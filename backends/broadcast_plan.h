// The broadcast of a binary elementwise op (numpy/torch rules) reduced to a minimal form,
// shared by the CPU and CUDA backends: both inputs padded to the output's rank, size-1
// dims dropped, and adjacent dims merged where both inputs stay contiguous across them.
// A kernel then walks the merged dims, where each input either advances (its stride) or
// repeats one value (stride 0).
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace tandem {

struct BroadcastPlan {
  std::vector<int64_t> dims;                // merged output dims, outermost first
  std::vector<int64_t> stride_a, stride_b;  // element strides of a and b per merged dim (0 = broadcast)
  int64_t numel = 0;
};

/// The plan for inputs of shapes `a` and `b` giving `out`. A scalar result has one dim of 1.
/// TANDEM_ASSERT fails when the shapes do not broadcast to `out`.
BroadcastPlan plan_broadcast(const Shape& a, const Shape& b, const Shape& out);

}  // namespace tandem
