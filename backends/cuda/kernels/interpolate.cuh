// interpolate on a GPU: one output element per thread, reading the taps of
// backends/interpolate_plan.h (the CPU's, computed on the device with the same float
// arithmetic). Backward zeroes dx and adds each dy element into its taps with atomicAdd:
// the sums are the CPU's up to the order of the additions.
#pragma once

#include <cuda_runtime_api.h>

#include "backends/interpolate_plan.h"

namespace tandem::cuda {

void interpolate_forward(const InterpolatePlan& p, const float* x, float* y, cudaStream_t stream);
void interpolate_backward(const InterpolatePlan& p, const float* dy, float* dx, cudaStream_t stream);

}  // namespace tandem::cuda
