#include "backends/cuda/kernels/binary.cuh"
#include "backends/cuda/kernels/launch.cuh"

namespace tandem::cuda {
namespace {

template <BinaryOp Op>
__global__ void forward_kernel(BroadcastIndexing index, float alpha, const float* __restrict__ a,
                               const float* __restrict__ b, float* __restrict__ y, int64_t numel) {
  for (int64_t i = global_thread(); i < numel; i += grid_threads()) {
    int64_t rest = i, oa = 0, ob = 0;
    for (int d = index.rank - 1; d >= 0; --d) {
      const int64_t coord = rest % index.dims[d];
      rest /= index.dims[d];
      oa += coord * index.stride_a[d];
      ob += coord * index.stride_b[d];
    }
    if constexpr (Op == BinaryOp::add)
      y[i] = a[oa] + alpha * b[ob];
    else if constexpr (Op == BinaryOp::mul)
      y[i] = a[oa] * b[ob];
    else
      y[i] = a[oa];
  }
}

__global__ void backward_kernel(ReduceIndexing index, const float* __restrict__ dy, const float* __restrict__ other,
                                float scale, float* __restrict__ dx) {
  for (int64_t e = global_thread(); e < index.x_numel; e += grid_threads()) {
    int64_t rest = e, base_out = 0, base_other = 0;
    for (int d = index.kept_rank - 1; d >= 0; --d) {
      const int64_t coord = rest % index.kept_dims[d];
      rest /= index.kept_dims[d];
      base_out += coord * index.kept_out[d];
      base_other += coord * index.kept_other[d];
    }
    float acc = 0.f;
    for (int64_t r = 0; r < index.summed_count; ++r) {
      int64_t rest_r = r, off_out = base_out, off_other = base_other;
      for (int d = index.summed_rank - 1; d >= 0; --d) {
        const int64_t coord = rest_r % index.summed_dims[d];
        rest_r /= index.summed_dims[d];
        off_out += coord * index.summed_out[d];
        off_other += coord * index.summed_other[d];
      }
      acc += other ? dy[off_out] * other[off_other] : dy[off_out];
    }
    dx[e] = scale * acc;
  }
}

}  // namespace

void binary_forward(BinaryOp op, float alpha, const BroadcastIndexing& index, const float* a, const float* b,
                    float* y, int64_t numel, cudaStream_t stream) {
  if (numel == 0) return;
  if (op == BinaryOp::add)
    forward_kernel<BinaryOp::add><<<grid_for(numel), kBlockSize, 0, stream>>>(index, alpha, a, b, y, numel);
  else if (op == BinaryOp::mul)
    forward_kernel<BinaryOp::mul><<<grid_for(numel), kBlockSize, 0, stream>>>(index, alpha, a, b, y, numel);
  else
    forward_kernel<BinaryOp::expand><<<grid_for(numel), kBlockSize, 0, stream>>>(index, alpha, a, b, y, numel);
  TANDEM_CUDA_CHECK_LAUNCH("binary_forward");
}

void binary_backward(const ReduceIndexing& index, const float* dy, const float* other, float scale, float* dx,
                     cudaStream_t stream) {
  if (index.x_numel == 0) return;
  backward_kernel<<<grid_for(index.x_numel), kBlockSize, 0, stream>>>(index, dy, other, scale, dx);
  TANDEM_CUDA_CHECK_LAUNCH("binary_backward");
}

}  // namespace tandem::cuda
