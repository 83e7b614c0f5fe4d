// conv1d, max_pool1d, avg_pool1d and batch_norm1d on the cpu: the 2-D ops' kernels (oneDNN's
// convolution, pooling and batch normalization) on views of height 1
// (graph/ops/height_one.h).
#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/ops/op_factories.h"
#include "backends/height_one_kernel.h"

namespace tandem {

std::unique_ptr<Kernel> make_height_one_kernel(CpuContext& ctx, const KernelSpec& spec) {
  return make_height_one_kernel(spec, [&ctx](const KernelSpec& two_d) { return find_cpu_kernel(two_d.op)(ctx, two_d); });
}

}  // namespace tandem
