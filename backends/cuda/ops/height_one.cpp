// conv1d, max_pool1d, avg_pool1d and batch_norm1d on a GPU: the 2-D ops' kernels (cuDNN's
// convolution, pooling and batch normalization) on views of height 1
// (graph/ops/height_one.h), with their limits.
#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/ops/op_factories.h"
#include "backends/height_one_kernel.h"

namespace tandem::cuda {

std::unique_ptr<Kernel> make_height_one_kernel(CudaContext& ctx, const KernelSpec& spec) {
  return tandem::make_height_one_kernel(spec, [&ctx](const KernelSpec& two_d) {
    CudaKernelChoice choice = make_cuda_kernel(ctx, two_d);
    if (!choice.kernel) throw Unsupported(choice.unsupported);
    return std::move(choice.kernel);
  });
}

}  // namespace tandem::cuda
