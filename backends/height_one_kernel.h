// The kernel of a 1-D op (conv1d, max_pool1d, avg_pool1d, batch_norm1d): its 2-D op's
// kernel, made for the 2-D spec and run on views of height 1 of the same tensors
// (graph/ops/height_one.h). Shared by every backend: each makes the inner kernel with its
// own factory.
#pragma once

#include <functional>
#include <memory>

#include "backends/kernel.h"

namespace tandem {

/// A factory of the backend's 2-D kernels, bound to its context.
using TwoDKernelFactory = std::function<std::unique_ptr<Kernel>(const KernelSpec&)>;

/// The kernel of the 1-D op `spec` (two_d_op(spec.op) must name its 2-D op); `make_2d`
/// makes the 2-D op's kernel for the 2-D spec, whose attributes the returned kernel owns.
std::unique_ptr<Kernel> make_height_one_kernel(const KernelSpec& spec, const TwoDKernelFactory& make_2d);

/// The 2-D op's spec for a 1-D op's `spec`, with `attrs` (two_d_attributes of spec's,
/// kept alive by the caller): for a backend's checks before it makes a kernel.
KernelSpec two_d_spec(const KernelSpec& spec, const Attributes& attrs);

}  // namespace tandem
