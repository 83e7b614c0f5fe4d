// The cpu's ComputeOps (backends/compute_ops.h): its oneDNN kernels (cpu_kernels.h) with a
// context of their own, and plain loops for the helpers. The cpu's Backend runs them on its
// lane; simulated GPUs are handed one each, so each device keeps its own primitives and
// scratchpad, as a GPU keeps its own.
#pragma once

#include <memory>

#include "backends/compute_ops.h"

namespace tandem::cpu {

/// A new set of the cpu's ComputeOps with a fresh CpuContext.
std::unique_ptr<ComputeOps> make_compute_ops();

}  // namespace tandem::cpu
