#include <cfloat>

#include "backends/cuda/kernels/launch.cuh"
#include "backends/cuda/kernels/reduce.cuh"

namespace tandem::cuda {
namespace {

/// The input offset of the `index`-th element of an n-dimensional grid of `sizes`, whose
/// dimensions are `strides` apart in the input.
__device__ inline int64_t offset_in(const int64_t* sizes, const int64_t* strides, int n, int64_t index) {
  int64_t offset = 0;
  for (int d = n - 1; d >= 0; --d) {
    offset += (index % sizes[d]) * strides[d];
    index /= sizes[d];
  }
  return offset;
}

/// The input offset of output element p's first input element.
__device__ inline int64_t kept_offset(const ReduceShape& s, int64_t p) {
  return offset_in(s.kept_sizes, s.kept_x_strides, s.kept, p);
}

/// The offset of the r-th of an output element's input elements from its first.
__device__ inline int64_t reduced_offset(const ReduceShape& s, int64_t r) {
  return offset_in(s.reduced_sizes, s.reduced_x_strides, s.reduced, r);
}

/// The output element input element i goes to.
__device__ inline int64_t output_of(const ReduceShape& s, int64_t i) {
  return offset_in(s.sizes, s.y_strides, s.rank, i);
}

__device__ inline float combine(ReduceKind kind, float a, float b) {
  if (kind == ReduceKind::amax) return (a > b || a != a) ? a : b;  // NaN wins, as torch's
  if (kind == ReduceKind::amin) return (a < b || a != a) ? a : b;
  return a + b;
}

__device__ inline float identity(ReduceKind kind) {
  return kind == ReduceKind::amax ? -INFINITY : kind == ReduceKind::amin ? INFINITY : 0.f;
}

/// One block per output element: its threads stride over the input elements, then
/// combine through shared memory.
__global__ void reduce_by_block(ReduceShape s, const float* __restrict__ x, float* __restrict__ y) {
  __shared__ float partial[kBlockSize];
  for (int64_t p = blockIdx.x; p < s.y_numel; p += gridDim.x) {
    const float* base = x + kept_offset(s, p);
    float acc = identity(s.kind);
    for (int64_t r = threadIdx.x; r < s.count; r += blockDim.x) acc = combine(s.kind, acc, base[reduced_offset(s, r)]);
    partial[threadIdx.x] = acc;
    __syncthreads();
    for (int half = blockDim.x / 2; half > 0; half /= 2) {
      if (threadIdx.x < half) partial[threadIdx.x] = combine(s.kind, partial[threadIdx.x], partial[threadIdx.x + half]);
      __syncthreads();
    }
    if (threadIdx.x == 0) y[p] = s.kind == ReduceKind::mean ? partial[0] / static_cast<float>(s.count) : partial[0];
    __syncthreads();
  }
}

/// One thread per output element, for short reductions.
__global__ void reduce_by_thread(ReduceShape s, const float* __restrict__ x, float* __restrict__ y) {
  for (int64_t p = global_thread(); p < s.y_numel; p += grid_threads()) {
    const float* base = x + kept_offset(s, p);
    float acc = identity(s.kind);
    for (int64_t r = 0; r < s.count; ++r) acc = combine(s.kind, acc, base[reduced_offset(s, r)]);
    y[p] = s.kind == ReduceKind::mean ? acc / static_cast<float>(s.count) : acc;
  }
}

__global__ void spread_kernel(ReduceShape s, const float* __restrict__ dy, float* __restrict__ dx) {
  const float count = static_cast<float>(s.count);
  for (int64_t i = global_thread(); i < s.x_numel; i += grid_threads()) {
    const float g = dy[output_of(s, i)];
    dx[i] = s.kind == ReduceKind::mean ? g / count : g;
  }
}

__global__ void count_ties_kernel(ReduceShape s, const float* __restrict__ x, const float* __restrict__ y,
                                  float* __restrict__ ties) {
  for (int64_t i = global_thread(); i < s.x_numel; i += grid_threads()) {
    const int64_t p = output_of(s, i);
    if (x[i] == y[p]) atomicAdd(ties + p, 1.f);
  }
}

__global__ void extremum_grad_kernel(ReduceShape s, const float* __restrict__ x, const float* __restrict__ y,
                                     const float* __restrict__ dy, const float* __restrict__ ties,
                                     float* __restrict__ dx) {
  for (int64_t i = global_thread(); i < s.x_numel; i += grid_threads()) {
    const int64_t p = output_of(s, i);
    dx[i] = x[i] == y[p] ? dy[p] / ties[p] : 0.f;
  }
}

}  // namespace

void reduce_forward(const ReduceShape& s, const float* x, float* y, cudaStream_t stream) {
  if (s.y_numel == 0) return;
  if (s.count >= 64) {
    const unsigned blocks = static_cast<unsigned>(s.y_numel < 65536 ? s.y_numel : 65536);
    reduce_by_block<<<blocks, kBlockSize, 0, stream>>>(s, x, y);
  } else {
    reduce_by_thread<<<grid_for(s.y_numel), kBlockSize, 0, stream>>>(s, x, y);
  }
  TANDEM_CUDA_CHECK_LAUNCH("reduce_forward");
}

void reduce_backward(const ReduceShape& s, const float* x, const float* y, const float* dy, float* dx, float* ties,
                     cudaStream_t stream) {
  if (s.x_numel == 0) return;
  if (s.kind == ReduceKind::sum || s.kind == ReduceKind::mean) {
    spread_kernel<<<grid_for(s.x_numel), kBlockSize, 0, stream>>>(s, dy, dx);
    TANDEM_CUDA_CHECK_LAUNCH("reduce_backward");
    return;
  }
  TANDEM_CUDA_CHECK(cudaMemsetAsync(ties, 0, static_cast<size_t>(s.y_numel) * sizeof(float), stream));
  count_ties_kernel<<<grid_for(s.x_numel), kBlockSize, 0, stream>>>(s, x, y, ties);
  TANDEM_CUDA_CHECK_LAUNCH("reduce_backward ties");
  extremum_grad_kernel<<<grid_for(s.x_numel), kBlockSize, 0, stream>>>(s, x, y, dy, ties, dx);
  TANDEM_CUDA_CHECK_LAUNCH("reduce_backward");
}

}  // namespace tandem::cuda
