// What every kernel file shares: launch sizes, grid-stride indexing and block reductions.
// Included by .cu files only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/cuda_error.h"

namespace tandem::cuda {

inline constexpr int kBlockSize = 256;

/// Blocks for a grid-stride loop over `n` items: one item per thread up to a cap, past
/// which each thread takes several (launching millions of blocks gains nothing).
inline unsigned grid_for(int64_t n, int block = kBlockSize) {
  const int64_t blocks = (n + block - 1) / block;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > 65536 ? 65536 : blocks));
}

__device__ inline int64_t global_thread() { return blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; }
__device__ inline int64_t grid_threads() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

/// The sum of `v` over a warp, in every lane.
template <class T>
__device__ inline T warp_sum(T v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

template <class T>
__device__ inline T warp_max(T v) {
  for (int offset = 16; offset > 0; offset /= 2) v = max(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

/// The sum of `v` over the block, in every thread. `scratch` holds 32 values in shared
/// memory; the block's size is a multiple of 32. Synchronises the block.
template <class T>
__device__ inline T block_sum(T v, T* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_sum(v);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : T(0);
  return warp_sum(v);
}

/// The maximum of `v` over the block, in every thread; as block_sum.
template <class T>
__device__ inline T block_max(T v, T* scratch, T lowest) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : lowest;
  return warp_max(v);
}

}  // namespace tandem::cuda
