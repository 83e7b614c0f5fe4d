// Fused optimizer updates on a GPU: torch.optim.SGD (momentum, dampening, Nesterov, L2
// weight decay) and Adam / AdamW, one kernel per parameter tensor, with the CPU's
// scalars (backends/update_scalars.h) and the CPU's order of operations, each
// rounding written out (__fmaf_rn, __fmul_rn, ...) so that nvcc fuses nothing on its own.
// The results match runtime/optim's bit for bit.
//
//   sgd:  p, g, buf [n]: buf may be null (no momentum); first: buf holds no history yet
//   adam: p, g, m (exp_avg), v (exp_avg_sq) [n]
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backends/update_scalars.h"

namespace tandem::cuda {

void sgd_update(const optim_detail::SgdScalars& s, float* p, const float* g, float* buf, int64_t n, bool first,
                cudaStream_t stream);
void adam_update(const optim_detail::AdamScalars& s, float* p, const float* g, float* m, float* v, int64_t n,
                 cudaStream_t stream);

}  // namespace tandem::cuda
