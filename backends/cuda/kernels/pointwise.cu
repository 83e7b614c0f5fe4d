#include "backends/cuda/kernels/launch.cuh"
#include "backends/cuda/kernels/pointwise.cuh"

namespace tandem::cuda {
namespace {

__global__ void fill_kernel(float* y, float value, int64_t n) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) y[i] = value;
}

__global__ void scale_kernel(float* y, float factor, int64_t n) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) y[i] = factor == 0.f ? 0.f : __fmul_rn(y[i], factor);
}

__global__ void accumulate_kernel(float* __restrict__ y, const float* __restrict__ x, float alpha, int64_t n) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) y[i] += alpha * x[i];
}

}  // namespace

void fill(float* y, float value, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  fill_kernel<<<grid_for(n), kBlockSize, 0, stream>>>(y, value, n);
  TANDEM_CUDA_CHECK_LAUNCH("fill");
}

void scale(float* y, float factor, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  scale_kernel<<<grid_for(n), kBlockSize, 0, stream>>>(y, factor, n);
  TANDEM_CUDA_CHECK_LAUNCH("scale");
}

void accumulate(float* y, const float* x, float alpha, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  accumulate_kernel<<<grid_for(n), kBlockSize, 0, stream>>>(y, x, alpha, n);
  TANDEM_CUDA_CHECK_LAUNCH("accumulate");
}

}  // namespace tandem::cuda
