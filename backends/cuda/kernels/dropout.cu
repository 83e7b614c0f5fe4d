#include "backends/cuda/kernels/dropout.cuh"
#include "backends/cuda/kernels/launch.cuh"
#include "backends/dropout_mask.h"

namespace tandem::cuda {
namespace {

__global__ void dropout_kernel(const float* in, float* out, int64_t n, float p, float scale, uint64_t seed,
                               int64_t group) {
  for (int64_t i = global_thread(); i < n; i += grid_threads())
    out[i] = dropout_keep(seed, static_cast<uint64_t>(group == 1 ? i : i / group), p) ? in[i] * scale : 0.f;
}

}  // namespace

void dropout_mask_apply(const float* in, float* out, int64_t n, float p, uint64_t seed, cudaStream_t stream,
                        int64_t group) {
  if (n == 0) return;
  // The scale as the CPU computes it, so that kept values match bit for bit.
  dropout_kernel<<<grid_for(n), kBlockSize, 0, stream>>>(in, out, n, p, 1.f / (1.f - p), seed, group);
  TANDEM_CUDA_CHECK_LAUNCH("dropout");
}

}  // namespace tandem::cuda
