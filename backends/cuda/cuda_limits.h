// What the CUDA kernels cannot run, decided from a spec alone (no device, no call into
// CUDA): the factories refuse these cases as Unsupported, and placement asks first
// (CudaBackend::cannot_run), so a layer the GPU cannot run is planned elsewhere, with this
// as the reason. Each returns empty when the kernel can run the spec.
#pragma once

#include <string>

#include "backends/kernel.h"

namespace tandem::cuda {

/// cuDNN takes no zero-sized tensor and pads symmetrically.
std::string conv2d_limit(const KernelSpec& spec);
/// max_pool2d, avg_pool2d: as conv2d, and no dilation, no window past the right edge.
std::string pool2d_limit(const KernelSpec& spec);
/// No zero-sized input; eps at least cuDNN's minimum.
std::string batch_norm2d_limit(const KernelSpec& spec);
/// add, mul: broadcasts of at most kMaxBroadcastDims merged dims.
std::string binary_limit(const KernelSpec& spec);

/// Why make_cuda_kernel would not give a kernel for `spec`: an op it lacks, a dtype, or
/// one of the limits above; empty when it would.
std::string cuda_cannot_run(const KernelSpec& spec);

}  // namespace tandem::cuda
