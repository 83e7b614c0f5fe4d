#include "backends/cuda/kernels/embedding.cuh"
#include "backends/cuda/kernels/launch.cuh"

namespace tandem::cuda {
namespace {

__device__ inline bool valid(int64_t i, int64_t num) { return i >= 0 && i < num; }

__global__ void gather_kernel(EmbeddingShape s, const int64_t* __restrict__ idx, const float* __restrict__ w,
                              float* __restrict__ out, unsigned long long* bad) {
  const int64_t n = s.count * s.dim;
  for (int64_t e = global_thread(); e < n; e += grid_threads()) {
    const int64_t i = e / s.dim, d = e % s.dim;
    const int64_t row = idx[i];
    if (!valid(row, s.num)) {
      if (d == 0) atomicMin(bad, static_cast<unsigned long long>(i));
      out[e] = 0.f;
      continue;
    }
    out[e] = w[row * s.dim + d];
  }
}

__global__ void scatter_add_kernel(EmbeddingShape s, const int64_t* __restrict__ idx, const float* __restrict__ dy,
                                   float* __restrict__ dw) {
  const int64_t n = s.count * s.dim;
  for (int64_t e = global_thread(); e < n; e += grid_threads()) {
    const int64_t i = e / s.dim, d = e % s.dim;
    const int64_t row = idx[i];
    if (row == s.padding_idx || !valid(row, s.num)) continue;
    atomicAdd(dw + row * s.dim + d, dy[e]);
  }
}

__global__ void check_indices_kernel(const int64_t* __restrict__ idx, int64_t count, int64_t num,
                                     unsigned long long* bad) {
  for (int64_t i = global_thread(); i < count; i += grid_threads())
    if (!valid(idx[i], num)) atomicMin(bad, static_cast<unsigned long long>(i));
}

/// offsets[0] == 0, non-decreasing, at most count (as the CPU checks them).
__global__ void check_offsets_kernel(const int64_t* __restrict__ offsets, int64_t num_offsets, int64_t count,
                                     unsigned long long* bad) {
  for (int64_t i = global_thread(); i < num_offsets; i += grid_threads()) {
    const bool ok = i == 0 ? offsets[0] == 0 : (offsets[i] >= offsets[i - 1] && offsets[i] <= count);
    if (!ok) atomicMin(bad, static_cast<unsigned long long>(i));
  }
}

/// The bag's entries [first, last), clamped into [0, count] so bad offsets read nothing outside.
__device__ inline void bag_range(const BagShape& s, const int64_t* offsets, int64_t b, int64_t& first, int64_t& last) {
  if (!offsets) {
    first = b * s.bag_len;
    last = first + s.bag_len;
    return;
  }
  first = min(max(offsets[b], int64_t{0}), s.count);
  last = b + 1 < s.num_offsets ? offsets[b + 1] : s.count;
  last = min(max(last, first), s.count);
}

__global__ void bag_forward_kernel(BagShape s, const int64_t* __restrict__ idx, const int64_t* __restrict__ offsets,
                                   const float* __restrict__ w, float* __restrict__ out) {
  const int64_t n = s.bags * s.dim;
  for (int64_t e = global_thread(); e < n; e += grid_threads()) {
    const int64_t b = e / s.dim, d = e % s.dim;
    int64_t first, last;
    bag_range(s, offsets, b, first, last);
    float acc = 0.f;
    int64_t used = 0;
    for (int64_t i = first; i < last; ++i) {
      const int64_t row = idx[i];
      if (row == s.padding_idx || !valid(row, s.num)) continue;
      const float v = w[row * s.dim + d];
      if (s.mode == BagMode::max) acc = used == 0 ? v : fmaxf(acc, v);
      else acc += v;
      ++used;
    }
    if (s.mode == BagMode::mean && used > 0) acc /= static_cast<float>(used);
    out[e] = acc;
  }
}

__global__ void bag_backward_kernel(BagShape s, const int64_t* __restrict__ idx, const int64_t* __restrict__ offsets,
                                    const float* __restrict__ w, const float* __restrict__ dy,
                                    float* __restrict__ dw) {
  const int64_t n = s.bags * s.dim;
  for (int64_t e = global_thread(); e < n; e += grid_threads()) {
    const int64_t b = e / s.dim, d = e % s.dim;
    int64_t first, last;
    bag_range(s, offsets, b, first, last);
    const float g = dy[e];
    if (s.mode == BagMode::max) {
      int64_t best = -1;
      for (int64_t i = first; i < last; ++i) {
        const int64_t row = idx[i];
        if (row == s.padding_idx || !valid(row, s.num)) continue;
        if (best < 0 || w[row * s.dim + d] > w[best * s.dim + d]) best = row;
      }
      if (best >= 0) atomicAdd(dw + best * s.dim + d, g);
      continue;
    }
    float scale = 1.f;
    if (s.mode == BagMode::mean) {
      int64_t used = 0;
      for (int64_t i = first; i < last; ++i) used += idx[i] != s.padding_idx && valid(idx[i], s.num);
      if (used == 0) continue;
      scale = 1.f / static_cast<float>(used);
    }
    for (int64_t i = first; i < last; ++i) {
      const int64_t row = idx[i];
      if (row == s.padding_idx || !valid(row, s.num)) continue;
      atomicAdd(dw + row * s.dim + d, g * scale);
    }
  }
}

__global__ void index_select_kernel(IndexSelectShape s, const int64_t* __restrict__ idx, const float* __restrict__ x,
                                    float* __restrict__ out, unsigned long long* bad) {
  const int64_t n = s.outer * s.count * s.inner;
  for (int64_t e = global_thread(); e < n; e += grid_threads()) {
    const int64_t d = e % s.inner, i = (e / s.inner) % s.count, o = e / (s.inner * s.count);
    const int64_t row = idx[i];
    if (!valid(row, s.size)) {
      if (d == 0 && o == 0) atomicMin(bad, static_cast<unsigned long long>(i));
      out[e] = 0.f;
      continue;
    }
    out[e] = x[(o * s.size + row) * s.inner + d];
  }
}

__global__ void index_select_backward_kernel(IndexSelectShape s, const int64_t* __restrict__ idx,
                                             const float* __restrict__ dy, float* __restrict__ dx) {
  const int64_t n = s.outer * s.count * s.inner;
  for (int64_t e = global_thread(); e < n; e += grid_threads()) {
    const int64_t d = e % s.inner, i = (e / s.inner) % s.count, o = e / (s.inner * s.count);
    const int64_t row = idx[i];
    if (valid(row, s.size)) atomicAdd(dx + (o * s.size + row) * s.inner + d, dy[e]);
  }
}

}  // namespace

void index_select_forward(const IndexSelectShape& s, const int64_t* idx, const float* source, float* out,
                          unsigned long long* bad, cudaStream_t stream) {
  const int64_t n = s.outer * s.count * s.inner;
  if (n > 0) {
    index_select_kernel<<<grid_for(n), kBlockSize, 0, stream>>>(s, idx, source, out, bad);
  } else if (s.count > 0) {
    check_indices_kernel<<<grid_for(s.count), kBlockSize, 0, stream>>>(idx, s.count, s.size, bad);
  }
  TANDEM_CUDA_CHECK_LAUNCH("index_select_forward");
}

void index_select_backward(const IndexSelectShape& s, const int64_t* idx, const float* dy, float* dsource,
                           cudaStream_t stream) {
  const int64_t bytes = s.outer * s.size * s.inner * static_cast<int64_t>(sizeof(float));
  if (bytes > 0) TANDEM_CUDA_CHECK(cudaMemsetAsync(dsource, 0, static_cast<size_t>(bytes), stream));
  const int64_t n = s.outer * s.count * s.inner;
  if (n == 0) return;
  index_select_backward_kernel<<<grid_for(n), kBlockSize, 0, stream>>>(s, idx, dy, dsource);
  TANDEM_CUDA_CHECK_LAUNCH("index_select_backward");
}

void embedding_forward(const EmbeddingShape& s, const int64_t* idx, const float* weight, float* out,
                       unsigned long long* bad, cudaStream_t stream) {
  const int64_t n = s.count * s.dim;
  if (n > 0) {
    gather_kernel<<<grid_for(n), kBlockSize, 0, stream>>>(s, idx, weight, out, bad);
  } else if (s.count > 0) {  // dim 0: nothing to gather, the indices still get checked
    check_indices_kernel<<<grid_for(s.count), kBlockSize, 0, stream>>>(idx, s.count, s.num, bad);
  }
  TANDEM_CUDA_CHECK_LAUNCH("embedding_forward");
}

void embedding_backward(const EmbeddingShape& s, const int64_t* idx, const float* dy, float* dweight,
                        cudaStream_t stream) {
  const int64_t n = s.count * s.dim;
  if (n == 0) return;
  scatter_add_kernel<<<grid_for(n), kBlockSize, 0, stream>>>(s, idx, dy, dweight);
  TANDEM_CUDA_CHECK_LAUNCH("embedding_backward");
}

void embedding_bag_forward(const BagShape& s, const int64_t* idx, const int64_t* offsets, const float* weight,
                           float* out, unsigned long long* bad, cudaStream_t stream) {
  if (s.count > 0) check_indices_kernel<<<grid_for(s.count), kBlockSize, 0, stream>>>(idx, s.count, s.num, bad);
  if (offsets && s.num_offsets > 0)
    check_offsets_kernel<<<grid_for(s.num_offsets), kBlockSize, 0, stream>>>(offsets, s.num_offsets, s.count, bad + 1);
  const int64_t n = s.bags * s.dim;
  if (n > 0) bag_forward_kernel<<<grid_for(n), kBlockSize, 0, stream>>>(s, idx, offsets, weight, out);
  TANDEM_CUDA_CHECK_LAUNCH("embedding_bag_forward");
}

void embedding_bag_backward(const BagShape& s, const int64_t* idx, const int64_t* offsets, const float* weight,
                            const float* dy, float* dweight, cudaStream_t stream) {
  const int64_t n = s.bags * s.dim;
  if (n == 0) return;
  bag_backward_kernel<<<grid_for(n), kBlockSize, 0, stream>>>(s, idx, offsets, weight, dy, dweight);
  TANDEM_CUDA_CHECK_LAUNCH("embedding_bag_backward");
}

}  // namespace tandem::cuda
