// The CPU backend's op kernels: one factory per op, looked up by op name.
#pragma once

#include <memory>
#include <string_view>

#include "backends/cpu/cpu_context.h"
#include "backends/kernel.h"

namespace tandem {

using CpuKernelFactory = std::unique_ptr<Kernel> (*)(CpuContext&, const KernelSpec&);

/// The factory for `op`, or nullptr when the CPU backend cannot run it.
CpuKernelFactory find_cpu_kernel(std::string_view op);

}  // namespace tandem
