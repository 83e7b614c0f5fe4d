// pad and roll on a GPU: the shifted copy of backends/shift_plan.h, one output element per
// thread (elements of 2, 4 or 8 bytes). The forward copies the input into the output; the
// backward the output gradient into the input gradient (the plan with negated offsets).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace tandem::cuda {

/// The most shifted leading dims a pad or roll takes on a GPU.
inline constexpr int kMaxShiftDims = 8;

struct ShiftGather {
  int rank = 0;  // leading dims; 0: a plain copy of `inner` elements
  int64_t sizes[kMaxShiftDims] = {};
  int64_t in_sizes[kMaxShiftDims] = {};
  int64_t offsets[kMaxShiftDims] = {};
  bool wraps[kMaxShiftDims] = {};
  int64_t inner = 1;
  int64_t numel = 0;  // of the output
  size_t elem = 0;
  uint64_t fill_bits = 0;
};

void shift_gather(const ShiftGather& g, const void* in, void* out, cudaStream_t stream);

}  // namespace tandem::cuda
