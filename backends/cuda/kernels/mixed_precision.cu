#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "backends/cuda/kernels/launch.cuh"
#include "backends/cuda/kernels/mixed_precision.cuh"

namespace tandem::cuda {
namespace {

__global__ void to_bf16_kernel(const float* __restrict__ src, __nv_bfloat16* __restrict__ dst, int64_t n) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) dst[i] = __float2bfloat16_rn(src[i]);
}

__global__ void to_f16_kernel(const float* __restrict__ src, __half* __restrict__ dst, int64_t n) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) dst[i] = __float2half_rn(src[i]);
}

template <class Half>
__global__ void widen_kernel(const Half* __restrict__ src, float* __restrict__ dst, int64_t n, bool accumulate) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    const float v = static_cast<float>(src[i]);
    dst[i] = accumulate ? dst[i] + v : v;
  }
}

__global__ void unscale_kernel(float* __restrict__ g, int64_t n, float inv_scale, int* found_inf) {
  bool bad = false;
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    const float v = g[i];
    bad = bad || !isfinite(v);  // before scaling, as torch and the host check
    g[i] = v * inv_scale;
  }
  if (__any_sync(0xffffffffu, bad) && threadIdx.x % 32 == 0) *found_inf = 1;
}

}  // namespace

void cast_to_half(HalfType type, const float* src, void* dst, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  if (type == HalfType::bf16)
    to_bf16_kernel<<<grid_for(n), kBlockSize, 0, stream>>>(src, static_cast<__nv_bfloat16*>(dst), n);
  else
    to_f16_kernel<<<grid_for(n), kBlockSize, 0, stream>>>(src, static_cast<__half*>(dst), n);
  TANDEM_CUDA_CHECK_LAUNCH("cast_to_half");
}

void widen_from_half(HalfType type, const void* src, float* dst, int64_t n, bool accumulate, cudaStream_t stream) {
  if (n == 0) return;
  if (type == HalfType::bf16)
    widen_kernel<<<grid_for(n), kBlockSize, 0, stream>>>(static_cast<const __nv_bfloat16*>(src), dst, n, accumulate);
  else
    widen_kernel<<<grid_for(n), kBlockSize, 0, stream>>>(static_cast<const __half*>(src), dst, n, accumulate);
  TANDEM_CUDA_CHECK_LAUNCH("widen_from_half");
}

void unscale_and_check(float* g, int64_t n, float inv_scale, int* found_inf, cudaStream_t stream) {
  if (n == 0) return;
  unscale_kernel<<<grid_for(n), kBlockSize, 0, stream>>>(g, n, inv_scale, found_inf);
  TANDEM_CUDA_CHECK_LAUNCH("unscale_and_check");
}

}  // namespace tandem::cuda
