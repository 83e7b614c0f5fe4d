#include <cmath>

#include "backends/cuda/kernels/launch.cuh"
#include "backends/cuda/kernels/softmax.cuh"

namespace tandem::cuda {
namespace {

/// Threads per row: a warp for short rows, more for long ones.
int row_block(int64_t axis) { return axis <= 64 ? 32 : (axis <= 1024 ? 128 : 512); }

template <bool Log>
__global__ void forward_rows(const float* __restrict__ x, float* __restrict__ y, int64_t rows, int64_t axis) {
  __shared__ float scratch[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* xr = x + r * axis;
    float* yr = y + r * axis;
    float mx = -INFINITY;
    for (int64_t a = threadIdx.x; a < axis; a += blockDim.x) mx = fmaxf(mx, xr[a]);
    mx = block_max(mx, scratch, -INFINITY);
    if (isinf(mx) && mx < 0) mx = 0.f;  // all -inf: NaN out, as torch, not inf - inf
    float sum = 0.f;
    for (int64_t a = threadIdx.x; a < axis; a += blockDim.x) sum += expf(xr[a] - mx);
    sum = block_sum(sum, scratch);
    if constexpr (Log) {
      const float shift = mx + logf(sum);
      for (int64_t a = threadIdx.x; a < axis; a += blockDim.x) yr[a] = xr[a] - shift;
    } else {
      const float scale = 1.f / sum;
      for (int64_t a = threadIdx.x; a < axis; a += blockDim.x) yr[a] = expf(xr[a] - mx) * scale;
    }
  }
}

template <bool Log>
__global__ void backward_rows(const float* __restrict__ y, const float* __restrict__ dy, float* __restrict__ dx,
                              int64_t rows, int64_t axis) {
  __shared__ float scratch[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* yr = y + r * axis;
    const float* gr = dy + r * axis;
    float* dr = dx + r * axis;
    float sum = 0.f;
    for (int64_t a = threadIdx.x; a < axis; a += blockDim.x) sum += Log ? gr[a] : gr[a] * yr[a];
    sum = block_sum(sum, scratch);
    for (int64_t a = threadIdx.x; a < axis; a += blockDim.x)
      dr[a] = Log ? gr[a] - expf(yr[a]) * sum : yr[a] * (gr[a] - sum);
  }
}

template <bool Log>
__global__ void forward_lanes(const float* __restrict__ x, float* __restrict__ y, int64_t lanes, int64_t axis,
                              int64_t inner) {
  for (int64_t lane = global_thread(); lane < lanes; lane += grid_threads()) {
    const int64_t base = (lane / inner) * axis * inner + lane % inner;
    const float* xl = x + base;
    float* yl = y + base;
    float mx = -INFINITY;
    for (int64_t a = 0; a < axis; ++a) mx = fmaxf(mx, xl[a * inner]);
    if (isinf(mx) && mx < 0) mx = 0.f;
    float sum = 0.f;
    for (int64_t a = 0; a < axis; ++a) sum += expf(xl[a * inner] - mx);
    if constexpr (Log) {
      const float shift = mx + logf(sum);
      for (int64_t a = 0; a < axis; ++a) yl[a * inner] = xl[a * inner] - shift;
    } else {
      const float scale = 1.f / sum;
      for (int64_t a = 0; a < axis; ++a) yl[a * inner] = expf(xl[a * inner] - mx) * scale;
    }
  }
}

template <bool Log>
__global__ void backward_lanes(const float* __restrict__ y, const float* __restrict__ dy, float* __restrict__ dx,
                               int64_t lanes, int64_t axis, int64_t inner) {
  for (int64_t lane = global_thread(); lane < lanes; lane += grid_threads()) {
    const int64_t base = (lane / inner) * axis * inner + lane % inner;
    float sum = 0.f;
    for (int64_t a = 0; a < axis; ++a) sum += Log ? dy[base + a * inner] : dy[base + a * inner] * y[base + a * inner];
    for (int64_t a = 0; a < axis; ++a) {
      const int64_t i = base + a * inner;
      dx[i] = Log ? dy[i] - expf(y[i]) * sum : y[i] * (dy[i] - sum);
    }
  }
}

__device__ inline float lane_norm(const float* xl, int64_t axis, int64_t inner) {
  float sum = 0.f;
  for (int64_t a = 0; a < axis; ++a) sum += xl[a * inner] * xl[a * inner];
  return sqrtf(sum);
}

__global__ void normalize_forward_lanes(float eps, const float* __restrict__ x, float* __restrict__ y, int64_t lanes,
                                        int64_t axis, int64_t inner) {
  for (int64_t lane = global_thread(); lane < lanes; lane += grid_threads()) {
    const int64_t base = (lane / inner) * axis * inner + lane % inner;
    const float d = fmaxf(lane_norm(x + base, axis, inner), eps);
    for (int64_t a = 0; a < axis; ++a) y[base + a * inner] = x[base + a * inner] / d;
  }
}

__global__ void normalize_backward_lanes(float eps, const float* __restrict__ x, const float* __restrict__ dy,
                                         float* __restrict__ dx, int64_t lanes, int64_t axis, int64_t inner) {
  for (int64_t lane = global_thread(); lane < lanes; lane += grid_threads()) {
    const int64_t base = (lane / inner) * axis * inner + lane % inner;
    const float n = lane_norm(x + base, axis, inner);
    if (n < eps) {
      for (int64_t a = 0; a < axis; ++a) dx[base + a * inner] = dy[base + a * inner] / eps;
      continue;
    }
    float gx = 0.f;
    for (int64_t a = 0; a < axis; ++a) gx += dy[base + a * inner] * x[base + a * inner];
    gx /= n * n;
    for (int64_t a = 0; a < axis; ++a) dx[base + a * inner] = (dy[base + a * inner] - x[base + a * inner] * gx) / n;
  }
}

unsigned row_grid(int64_t rows) { return static_cast<unsigned>(rows < 65536 ? (rows < 1 ? 1 : rows) : 65536); }

}  // namespace

void softmax_forward(bool log, const SoftmaxShape& s, const float* x, float* y, cudaStream_t stream) {
  const int64_t rows = s.outer * s.inner;
  if (rows == 0 || s.axis == 0) return;
  if (s.inner == 1) {
    const int block = row_block(s.axis);
    if (log) forward_rows<true><<<row_grid(rows), block, 0, stream>>>(x, y, rows, s.axis);
    else forward_rows<false><<<row_grid(rows), block, 0, stream>>>(x, y, rows, s.axis);
  } else {
    if (log) forward_lanes<true><<<grid_for(rows), kBlockSize, 0, stream>>>(x, y, rows, s.axis, s.inner);
    else forward_lanes<false><<<grid_for(rows), kBlockSize, 0, stream>>>(x, y, rows, s.axis, s.inner);
  }
  TANDEM_CUDA_CHECK_LAUNCH("softmax_forward");
}

void softmax_backward(bool log, const SoftmaxShape& s, const float* y, const float* dy, float* dx,
                      cudaStream_t stream) {
  const int64_t rows = s.outer * s.inner;
  if (rows == 0 || s.axis == 0) return;
  if (s.inner == 1) {
    const int block = row_block(s.axis);
    if (log) backward_rows<true><<<row_grid(rows), block, 0, stream>>>(y, dy, dx, rows, s.axis);
    else backward_rows<false><<<row_grid(rows), block, 0, stream>>>(y, dy, dx, rows, s.axis);
  } else {
    if (log) backward_lanes<true><<<grid_for(rows), kBlockSize, 0, stream>>>(y, dy, dx, rows, s.axis, s.inner);
    else backward_lanes<false><<<grid_for(rows), kBlockSize, 0, stream>>>(y, dy, dx, rows, s.axis, s.inner);
  }
  TANDEM_CUDA_CHECK_LAUNCH("softmax_backward");
}

void normalize_forward(const SoftmaxShape& s, float eps, const float* x, float* y, cudaStream_t stream) {
  const int64_t lanes = s.outer * s.inner;
  if (lanes == 0 || s.axis == 0) return;
  normalize_forward_lanes<<<grid_for(lanes), kBlockSize, 0, stream>>>(eps, x, y, lanes, s.axis, s.inner);
  TANDEM_CUDA_CHECK_LAUNCH("normalize_forward");
}

void normalize_backward(const SoftmaxShape& s, float eps, const float* x, const float* dy, float* dx,
                        cudaStream_t stream) {
  const int64_t lanes = s.outer * s.inner;
  if (lanes == 0 || s.axis == 0) return;
  normalize_backward_lanes<<<grid_for(lanes), kBlockSize, 0, stream>>>(eps, x, dy, dx, lanes, s.axis, s.inner);
  TANDEM_CUDA_CHECK_LAUNCH("normalize_backward");
}

}  // namespace tandem::cuda
