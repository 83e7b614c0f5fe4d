// The CUDA backend's op kernels, looked up by spec: a Kernel for a GPU, or the reason
// there is none, so that the runtime can run the layer elsewhere (the CPU) instead.
// Mirrors backends/cpu/cpu_kernels.h.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "backends/kernel.h"

namespace tandem::cuda {

class CudaContext;

/// A kernel, or why the CUDA backend has none for the spec (kernel null).
struct CudaKernelChoice {
  std::unique_ptr<Kernel> kernel;
  std::string unsupported;
};

/// The CUDA kernel for `spec` on `ctx`'s device. Unsupported (not an error): an op the
/// backend lacks, a dtype other than the CPU kernel's, or a limit of its kernel. Bad
/// input (attributes, shapes) throws UserError, as the CPU's factories do.
CudaKernelChoice make_cuda_kernel(CudaContext& ctx, const KernelSpec& spec);

/// Why the dtypes of `spec`'s tensors are not those the CUDA kernel takes; empty when they are.
std::string cuda_dtype_mismatch(const KernelSpec& spec);

/// Whether the backend has a kernel for `op` at all.
bool cuda_has_op(std::string_view op);
/// The ops it has, in the registry's order.
std::vector<std::string_view> cuda_ops();

}  // namespace tandem::cuda
