#include "backends/cuda/kernels/launch.cuh"
#include "backends/cuda/kernels/sum_of_squares.cuh"
#include "backends/optimizer_update.h"

namespace tandem::cuda {
namespace {

__global__ void block_sums_kernel(const float* __restrict__ x, int64_t n, int64_t blocks, double* __restrict__ partial) {
  const int64_t b = global_thread();
  if (b >= blocks) return;
  const int64_t end = min(n, (b + 1) * kNormBlock);
  double lanes[8] = {};
  int64_t i = b * kNormBlock;
  for (; i + 8 <= end; i += 8)
    for (int j = 0; j < 8; ++j) {
      const double v = static_cast<double>(x[i + j]);
      lanes[j] = __dadd_rn(lanes[j], __dmul_rn(v, v));
    }
  for (; i < end; ++i) {
    const double v = static_cast<double>(x[i]);
    lanes[0] = __dadd_rn(lanes[0], __dmul_rn(v, v));
  }
  double s = 0;
  for (int j = 0; j < 8; ++j) s = __dadd_rn(s, lanes[j]);
  partial[b] = s;
}

}  // namespace

int64_t norm_blocks(int64_t n) { return (n + kNormBlock - 1) / kNormBlock; }

void block_sums_of_squares(const float* x, int64_t n, double* partial, cudaStream_t stream) {
  const int64_t blocks = norm_blocks(n);
  if (blocks == 0) return;
  block_sums_kernel<<<grid_for(blocks), kBlockSize, 0, stream>>>(x, n, blocks, partial);
  TANDEM_CUDA_CHECK_LAUNCH("block_sums_of_squares");
}

}  // namespace tandem::cuda
