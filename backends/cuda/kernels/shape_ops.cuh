// permute on a GPU: the strided gather of backends/copy_plan.h's PermutePlan, one output
// element per thread (any dtype of 2, 4 or 8 bytes). The forward gathers the input into
// the output; the backward the output gradient into the input gradient (the plan of the
// inverse permutation). cat, narrow, flatten and reshape need no kernel of their own:
// backends/cuda/ops/shape_ops.cpp copies their rows with cudaMemcpy2DAsync.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace tandem::cuda {

/// The most merged dims a permute takes on a GPU (a plan merges adjacent ones, so this is
/// the rank of the tensor at most).
inline constexpr int kMaxPermuteDims = 8;

struct PermuteGather {
  int rank = 0;                        // merged dims; 0: one element
  int64_t sizes[kMaxPermuteDims] = {};  // of the output, outermost first
  int64_t in_strides[kMaxPermuteDims] = {};
  int64_t numel = 0;
  size_t elem = 0;  // 2, 4 or 8 bytes
};

void permute_gather(const PermuteGather& g, const void* in, void* out, cudaStream_t stream);

}  // namespace tandem::cuda
