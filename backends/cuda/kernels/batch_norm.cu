#include "backends/cuda/kernels/batch_norm.cuh"
#include "backends/cuda/kernels/launch.cuh"

namespace tandem::cuda {
namespace {

__global__ void count_kernel(int64_t* tracked) { *tracked += 1; }

__global__ void input_grad_kernel(BatchNormShape s, const float* __restrict__ dy, const float* __restrict__ w,
                                  const float* __restrict__ var, float* __restrict__ dx) {
  const int64_t total = s.n * s.c * s.hw;
  for (int64_t i = global_thread(); i < total; i += grid_threads()) {
    const int64_t ch = (i / s.hw) % s.c;
    const float rstd = 1.f / sqrtf(var[ch] + s.eps);
    dx[i] = dy[i] * (w ? w[ch] : 1.f) * rstd;
  }
}

/// One block per channel.
__global__ void param_grad_kernel(BatchNormShape s, const float* __restrict__ x, const float* __restrict__ dy,
                                  const float* __restrict__ mean, const float* __restrict__ var,
                                  float* __restrict__ dw, float* __restrict__ db) {
  __shared__ float scratch[32];
  const int64_t ch = blockIdx.x;
  const float m = mean[ch], rstd = 1.f / sqrtf(var[ch] + s.eps);
  float sum_dy = 0.f, sum_dy_xhat = 0.f;
  for (int64_t i = threadIdx.x; i < s.n * s.hw; i += blockDim.x) {
    const int64_t at = ((i / s.hw) * s.c + ch) * s.hw + i % s.hw;
    sum_dy += dy[at];
    sum_dy_xhat += dy[at] * (x[at] - m) * rstd;
  }
  sum_dy = block_sum(sum_dy, scratch);
  sum_dy_xhat = block_sum(sum_dy_xhat, scratch);
  if (threadIdx.x == 0) {
    if (dw) dw[ch] += sum_dy_xhat;
    if (db) db[ch] += sum_dy;
  }
}

}  // namespace

void count_batch(int64_t* tracked, cudaStream_t stream) {
  count_kernel<<<1, 1, 0, stream>>>(tracked);
  TANDEM_CUDA_CHECK_LAUNCH("count_batch");
}

void batch_norm_fixed_backward(const BatchNormShape& s, const float* x, const float* dy, const float* weight,
                               const float* mean, const float* var, float* dx, float* dweight, float* dbias,
                               cudaStream_t stream) {
  const int64_t total = s.n * s.c * s.hw;
  if (total == 0) return;
  if (dx) input_grad_kernel<<<grid_for(total), kBlockSize, 0, stream>>>(s, dy, weight, var, dx);
  if (dweight || dbias)
    param_grad_kernel<<<static_cast<unsigned>(s.c), kBlockSize, 0, stream>>>(s, x, dy, mean, var, dweight, dbias);
  TANDEM_CUDA_CHECK_LAUNCH("batch_norm_fixed_backward");
}

}  // namespace tandem::cuda
