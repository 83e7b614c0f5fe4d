#include "backends/cuda/kernels/launch.cuh"
#include "backends/cuda/kernels/layer_norm.cuh"

namespace tandem::cuda {
namespace {

constexpr int kRowBlock = 128;
constexpr int64_t kMaxChunks = 256;

int64_t rows_per_chunk(int64_t rows) {
  const int64_t per = (rows + kMaxChunks - 1) / kMaxChunks;
  return per < 32 ? 32 : per;
}

int64_t chunk_count(int64_t rows) { return (rows + rows_per_chunk(rows) - 1) / rows_per_chunk(rows); }

/// The row's mean and rstd, in every thread of the block.
__device__ void row_stats(const float* xr, int64_t cols, float eps, float* scratch, float& mean, float& rstd) {
  float sum = 0.f;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) sum += xr[c];
  mean = block_sum(sum, scratch) / static_cast<float>(cols);
  float sq = 0.f;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) sq += (xr[c] - mean) * (xr[c] - mean);
  rstd = 1.f / sqrtf(block_sum(sq, scratch) / static_cast<float>(cols) + eps);  // not rsqrtf: as the CPU rounds
}

__global__ void forward_kernel(LayerNormShape s, const float* __restrict__ x, const float* __restrict__ w,
                               const float* __restrict__ b, float* __restrict__ y) {
  __shared__ float scratch[32];
  for (int64_t r = blockIdx.x; r < s.rows; r += gridDim.x) {
    const float* xr = x + r * s.cols;
    float* yr = y + r * s.cols;
    float mean, rstd;
    row_stats(xr, s.cols, s.eps, scratch, mean, rstd);
    for (int64_t c = threadIdx.x; c < s.cols; c += blockDim.x) {
      float v = (xr[c] - mean) * rstd;
      if (w) v *= w[c];
      if (b) v += b[c];
      yr[c] = v;
    }
  }
}

/// Per row: stats into `stats` [R, 2]; dx when wanted.
__global__ void input_grad_kernel(LayerNormShape s, const float* __restrict__ x, const float* __restrict__ w,
                                  const float* __restrict__ dy, float* __restrict__ dx, float* __restrict__ stats) {
  __shared__ float scratch[32];
  const float inv_cols = 1.f / static_cast<float>(s.cols);
  for (int64_t r = blockIdx.x; r < s.rows; r += gridDim.x) {
    const float* xr = x + r * s.cols;
    const float* gr = dy + r * s.cols;
    float mean, rstd;
    row_stats(xr, s.cols, s.eps, scratch, mean, rstd);
    if (threadIdx.x == 0) {
      stats[2 * r] = mean;
      stats[2 * r + 1] = rstd;
    }
    if (!dx) continue;
    float sum_g = 0.f, sum_gx = 0.f;
    for (int64_t c = threadIdx.x; c < s.cols; c += blockDim.x) {
      const float g = w ? gr[c] * w[c] : gr[c];
      sum_g += g;
      sum_gx += g * (xr[c] - mean) * rstd;
    }
    const float mean_g = block_sum(sum_g, scratch) * inv_cols;
    const float mean_gx = block_sum(sum_gx, scratch) * inv_cols;
    float* dxr = dx + r * s.cols;
    for (int64_t c = threadIdx.x; c < s.cols; c += blockDim.x) {
      const float g = w ? gr[c] * w[c] : gr[c];
      dxr[c] = rstd * (g - mean_g - (xr[c] - mean) * rstd * mean_gx);
    }
  }
}

/// partial [chunks, 2, C]: per chunk of rows, sum(dy xhat) and sum(dy) per column.
__global__ void param_partial_kernel(LayerNormShape s, const float* __restrict__ x, const float* __restrict__ dy,
                                     const float* __restrict__ stats, float* __restrict__ partial, int64_t per_chunk) {
  const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t chunk = blockIdx.y;
  if (c >= s.cols) return;
  const int64_t first = chunk * per_chunk, last = min(s.rows, first + per_chunk);
  float dw = 0.f, db = 0.f;
  for (int64_t r = first; r < last; ++r) {
    const float g = dy[r * s.cols + c];
    dw += g * (x[r * s.cols + c] - stats[2 * r]) * stats[2 * r + 1];
    db += g;
  }
  partial[(chunk * 2) * s.cols + c] = dw;
  partial[(chunk * 2 + 1) * s.cols + c] = db;
}

__global__ void param_sum_kernel(int64_t cols, int64_t chunks, const float* __restrict__ partial,
                                 float* __restrict__ dweight, float* __restrict__ dbias) {
  for (int64_t c = global_thread(); c < cols; c += grid_threads()) {
    float dw = 0.f, db = 0.f;
    for (int64_t k = 0; k < chunks; ++k) {
      dw += partial[(k * 2) * cols + c];
      db += partial[(k * 2 + 1) * cols + c];
    }
    if (dweight) dweight[c] += dw;
    if (dbias) dbias[c] += db;
  }
}

unsigned row_grid(int64_t rows) { return static_cast<unsigned>(rows < 65536 ? (rows < 1 ? 1 : rows) : 65536); }

}  // namespace

void layer_norm_forward(const LayerNormShape& s, const float* x, const float* weight, const float* bias, float* y,
                        cudaStream_t stream) {
  if (s.rows == 0 || s.cols == 0) return;
  forward_kernel<<<row_grid(s.rows), kRowBlock, 0, stream>>>(s, x, weight, bias, y);
  TANDEM_CUDA_CHECK_LAUNCH("layer_norm_forward");
}

size_t layer_norm_backward_scratch(const LayerNormShape& s) {
  return static_cast<size_t>(2 * s.rows + 2 * chunk_count(s.rows) * s.cols);
}

void layer_norm_backward(const LayerNormShape& s, const float* x, const float* weight, const float* dy, float* dx,
                         float* dweight, float* dbias, float* scratch, cudaStream_t stream) {
  if (s.rows == 0 || s.cols == 0) return;
  float* stats = scratch;
  input_grad_kernel<<<row_grid(s.rows), kRowBlock, 0, stream>>>(s, x, weight, dy, dx, stats);
  TANDEM_CUDA_CHECK_LAUNCH("layer_norm_backward (input)");
  if (!dweight && !dbias) return;
  const int64_t per_chunk = rows_per_chunk(s.rows), chunks = chunk_count(s.rows);
  float* partial = scratch + 2 * s.rows;
  const dim3 grid(static_cast<unsigned>((s.cols + kBlockSize - 1) / kBlockSize), static_cast<unsigned>(chunks));
  param_partial_kernel<<<grid, kBlockSize, 0, stream>>>(s, x, dy, stats, partial, per_chunk);
  TANDEM_CUDA_CHECK_LAUNCH("layer_norm_backward (partial sums)");
  param_sum_kernel<<<grid_for(s.cols), kBlockSize, 0, stream>>>(s.cols, chunks, partial, dweight, dbias);
  TANDEM_CUDA_CHECK_LAUNCH("layer_norm_backward (parameters)");
}

}  // namespace tandem::cuda
